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
