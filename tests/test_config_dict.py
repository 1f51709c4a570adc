"""``mesh.info``'s ``config``: the settings as plain data (:func:`meshd.config.as_dict`)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from meshd.config import as_dict, load


def test_settings_as_plain_data(tmp_path: Path) -> None:
    """Every key with its value; the fleet table as a table, jobs by name, lists as lists."""
    config = tmp_path / "config.toml"
    config.write_text(
        "[defaults]\nstale_after = 9\nvisible_to_profiles = ['work', 'home']\n"
        "[jobs.backup]\nresources = ['res:nas']\n"
        "[fleet]\nurl = 'nats://127.0.0.1:4222'\nname = 'h1'\nshared_kinds = ['res']\n"
    )
    out = as_dict(load(config, "test"))

    assert out["stale_after"] == 9
    assert out["visible_to_profiles"] == ["work", "home"]
    assert out["jobs"] == ["backup"]
    assert out["fleet"] == {
        "urls": ("nats://127.0.0.1:4222",),
        "name": "h1",
        "creds": None,
        "nkey": None,
        "tls_ca": None,
        "shared_kinds": ("res",),
        "shared_paths": (),
        "on_partition": "fail",
    }
    assert msgspec.json.decode(msgspec.json.encode(out))["fleet"]["urls"] == [
        "nats://127.0.0.1:4222"
    ]
    assert set(out) >= {"enabled", "heartbeat_interval", "max_connections", "idle_timeout"}


def test_an_unknown_key_says_which_keys_were_expected(tmp_path: Path) -> None:
    """SPEC §2: an unknown key is refused "with the file, the key and what was
    expected": the keys that table takes, and the near one a typo meant."""
    import pytest

    from meshd.config import ConfigError

    config = tmp_path / "config.toml"
    for text, key, near in [
        ("[defaults]\nstale_aftr = 3\n", "defaults.stale_aftr", "stale_after"),
        ("[profiles.work]\nexpire_afterr = 3\n", "profiles.work.expire_afterr", "expire_after"),
        ("[jobs.backup]\nresources = ['res:nas']\npolcy = 'skip'\n", "jobs.backup.polcy", "policy"),
        ("[default]\nenabled = true\n", "default", "defaults"),
    ]:
        config.write_text(text)
        with pytest.raises(ConfigError) as err:
            load(config, "work")

        message = str(err.value)
        assert message.startswith(f"{config}: key `{key}`: unknown key"), message
        assert "expected one of" in message, message
        assert f"did you mean `{near}`?" in message, message


def test_a_setting_at_the_top_level_says_to_put_it_under_defaults(tmp_path: Path) -> None:
    """SPEC §2's table names the keys bare (``enabled``), and ``enabled = false`` on the
    first line of the file is a top-level key: the refusal listed the tables and
    suggested nothing (``enable = false`` was told "did you mean `defaults`?"). It now
    says the key is a setting and where it goes (fails before)."""
    import pytest

    from meshd.config import ConfigError

    config = tmp_path / "config.toml"
    config.write_text("enabled = false\n[defaults]\nstale_after = 9\n")
    with pytest.raises(ConfigError) as err:
        load(config, "work")

    message = str(err.value)
    assert message.startswith(f"{config}: key `enabled`: unknown key"), message
    assert "`enabled` is a setting: put it under a `[defaults]`" in message, message
    assert "did you mean" not in message, message


def test_visible_to_profiles_takes_profile_names_or_star(tmp_path: Path) -> None:
    """SPEC §2: ``visible_to_profiles`` lists profiles (``["*"]`` = all), and profile
    names are ``[A-Za-z0-9_.-]{1,64}``. An entry that is neither could never match and
    was taken in silence (``["work, home"]``: nobody saw this profile); it is refused
    at load, naming the key and the entry, as a ``[profiles.NAME]`` table with such a
    name is (fails before)."""
    import pytest

    from meshd.config import ConfigError

    config = tmp_path / "config.toml"
    for text, key in [
        ("[defaults]\nvisible_to_profiles = ['work, home']\n", "defaults"),
        ("[profiles.work]\nvisible_to_profiles = ['home', '']\n", "profiles.work"),
        ("[profiles.other]\nvisible_to_profiles = ['* ']\n", "profiles.other"),
    ]:
        config.write_text(text)
        with pytest.raises(ConfigError) as err:
            load(config, "work")

        message = str(err.value)
        assert message.startswith(f"{config}: key `{key}.visible_to_profiles`: "), message
        assert "is not a profile name" in message, message

    config.write_text("[defaults]\nvisible_to_profiles = ['*', 'home', 'a.b-c_1']\n")
    assert load(config, "work").visible_to_profiles == ("*", "home", "a.b-c_1")
