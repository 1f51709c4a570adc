"""The ``[fleet]`` table (SPEC §2, §12): defaults, one URL or several, and a clear
refusal -- file, key, what was expected -- for every way it can be broken."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import MeshEnv

from meshd import config
from meshd.core.settings import DEFAULT_SHARED_KINDS


def load(tmp: Path, text: str) -> config.Settings:
    path = tmp / "config.toml"
    path.write_text(text)
    return config.load(path, "default")


def test_defaults(short_tmp: Path) -> None:
    fleet = load(short_tmp, '[fleet]\nurl = "nats://127.0.0.1:4222"\n').fleet

    assert fleet is not None
    assert fleet.urls == ("nats://127.0.0.1:4222",)
    assert fleet.name == config.default_host_name()
    assert (
        fleet.shared_kinds == DEFAULT_SHARED_KINDS == ("box", "account", "cron", "gateway", "res")
    )
    assert fleet.shared_paths == ()
    assert fleet.on_partition == "fail"
    assert (fleet.creds, fleet.nkey, fleet.tls_ca) == (None, None, None)


def test_no_table_no_fleet(short_tmp: Path) -> None:
    assert load(short_tmp, "[defaults]\nstale_after = 3\n").fleet is None


def test_every_key(short_tmp: Path) -> None:
    creds = short_tmp / "u.creds"
    creds.write_text("x")
    ca = short_tmp / "ca.pem"
    ca.write_text("x")
    shared = short_tmp / "shared"
    (shared / "sub").mkdir(parents=True)
    link = short_tmp / "link"
    link.symlink_to(shared)

    fleet = load(
        short_tmp,
        "[fleet]\n"
        'url = ["tls://a.example:4222", "nats://b.example:4222"]\n'
        f'creds = "{creds}"\ntls_ca = "{ca}"\nname = "vps.gateway"\n'
        'shared_kinds = ["box", "port", "box"]\n'
        f'shared_paths = ["{link}/sub/..", "{shared}"]\n'
        'on_partition = "local"\n',
    ).fleet

    assert fleet is not None
    assert fleet.urls == ("tls://a.example:4222", "nats://b.example:4222")
    assert (fleet.creds, fleet.tls_ca, fleet.name) == (str(creds), str(ca), "vps.gateway")
    assert fleet.shared_kinds == ("box", "port")
    assert fleet.shared_paths == (os.path.realpath(shared),)  # canonical, once
    assert fleet.on_partition == "local"


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("fleet = 3\n", "`fleet` must be a table"),
        ("[fleet]\nname = 'x'\n", "missing required field `url`"),
        ("[fleet]\nurl = 'http://x:1'\n", "key `fleet.url`: 'http://x:1' is not a NATS URL"),
        ("[fleet]\nurl = []\n", "key `fleet.url`: name at least one"),
        ("[fleet]\nurl = 4222\n", "key `fleet.url`"),
        ("[fleet]\nurl = 'nats://x:1'\nurll = 1\n", "key `fleet.urll`: unknown key"),
        ("[fleet]\nurl = 'nats://x:1'\non_partition = 'maybe'\n", "expected 'fail' or 'local'"),
        ("[fleet]\nurl = 'nats://x:1'\nname = 'a b'\n", "key `fleet.name`: 'a b'"),
        ("[fleet]\nurl = 'nats://x:1'\ncreds = '/nonexistent/u.creds'\n", "no such file"),
        ("[fleet]\nurl = 'nats://x:1'\nnkey = 'rel.nk'\n", "not an absolute path"),
        ("[fleet]\nurl = 'nats://x:1'\nshared_kinds = ['file']\n", "fleet.shared_paths"),
        ("[fleet]\nurl = 'nats://x:1'\nshared_kinds = ['disk']\n", "'disk' is not a claim kind"),
        ("[fleet]\nurl = 'nats://x:1'\nshared_paths = ['rel/dir']\n", "not an absolute path"),
        ("[fleet]\nurl = 'nats://x:1'\nshared_paths = ['/']\n", "would share every file"),
    ],
)
def test_broken_table_is_a_config_error(short_tmp: Path, text: str, expect: str) -> None:
    with pytest.raises(config.ConfigError) as err:
        load(short_tmp, text)

    assert str(short_tmp / "config.toml") in str(err.value)
    assert expect in str(err.value)


def test_a_shared_path_into_a_folder_not_named_in_utf8_is_refused(short_tmp: Path) -> None:
    """It resolved to a string that could not be sent (fleet.status) nor matched by
    any key (those are refused BAD_KEY): refused at load, naming it escaped."""
    os.mkdir(os.path.join(os.fsencode(short_tmp), b"caf\xe9"))
    os.symlink(os.path.join(os.fsencode(short_tmp), b"caf\xe9"), short_tmp / "link")
    with pytest.raises(config.ConfigError, match="not UTF-8") as err:
        load(short_tmp, f"[fleet]\nurl = 'nats://x:1'\nshared_paths = ['{short_tmp}/link']\n")

    assert '"caf\\xe9"' not in str(err.value)  # the whole path, escaped once
    assert 'caf\\xe9", a name that is not UTF-8' in str(err.value)


def test_creds_and_nkey_together_refused(short_tmp: Path) -> None:
    (short_tmp / "a").write_text("x")
    with pytest.raises(config.ConfigError, match="give one, not both"):
        load(
            short_tmp,
            f"[fleet]\nurl = 'nats://x:1'\ncreds = '{short_tmp}/a'\nnkey = '{short_tmp}/a'\n",
        )


def test_daemon_refuses_a_broken_fleet_table(mesh_env: MeshEnv) -> None:
    mesh_env.write_config("[fleet]\nurl = 'http://nats.example'\n")
    out = subprocess.run(
        [sys.executable, "-m", "meshd", "run", "--profile", "test"],
        env=mesh_env.env, capture_output=True, text=True, timeout=20,
    )  # fmt: skip

    assert out.returncode == 1
    assert str(mesh_env.config) in out.stderr
    assert "fleet.url" in out.stderr


MIXED = '[jobs.mixed]\nresources = ["res:disk9", "port:7001"]\n'


def test_a_job_mixing_fleet_wide_and_local_keys_is_refused_in_a_fleet(short_tmp: Path) -> None:
    """The daemon refuses such a set in a fleet (BAD_KEY, "a set is one or the other"),
    so the job could never run: said at load, with how to split it. Before, the file
    loaded and every ``meshctl job run mixed`` failed."""
    with pytest.raises(config.ConfigError) as err:
        load(short_tmp, MIXED + "[fleet]\nurl = 'nats://x:1'\n")

    said = str(err.value)
    assert "key `jobs.mixed.resources`" in said
    assert "res:disk9 is fleet-wide" in said
    assert "port:7001 is local" in said
    assert "split it into two jobs" in said
    with pytest.raises(config.ConfigError, match="res:disk9 is local"):  # port made fleet-wide
        load(short_tmp, MIXED + "[fleet]\nurl = 'nats://x:1'\nshared_kinds = ['port']\n")


def test_a_job_on_one_side_loads_in_a_fleet_and_any_job_alone(short_tmp: Path) -> None:
    assert len(load(short_tmp, MIXED).jobs) == 1  # alone, every key is local
    one_side = (
        '[jobs.wide]\nresources = ["res:disk9", "box:gpu"]\n'
        '[jobs.here]\nresources = ["port:7001", "ui:desktop"]\n'
        "[fleet]\nurl = 'nats://x:1'\n"
    )
    assert [j.name for j in load(short_tmp, one_side).jobs] == ["wide", "here"]
