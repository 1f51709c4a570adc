"""``meshctl fleet status`` on a host that is in no fleet: the config file answers, and
no daemon is started to say so (SPEC §9 starts one for a command that needs it; this
one does not, as ``daemon status`` does not)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.cli.conftest import Meshctl


def test_no_fleet_and_no_daemon_starts_none(meshctl: Meshctl, offline_env: Any) -> None:
    env = offline_env.env

    try:
        r = meshctl("fleet", "status", env=env)
        j = meshctl("fleet", "status", "--json", env=env)
        stopped = meshctl("daemon", "stop", "--json", env=env)
    finally:
        meshctl("daemon", "stop", env=env)  # one started by mistake is not left running

    assert r.code == 0, r
    assert f"This host is not in a fleet (no [fleet] table in {env['MESH_CONFIG']})." in r.out
    assert "started meshd" not in r.err
    assert j.code == 0, j
    assert j.json()["configured"] is False
    assert j.json()["connected"] is False
    assert stopped.json()["stopped"] is False, stopped
    assert not Path(env["MESH_SOCKET"]).exists()


def test_a_running_daemon_is_asked(meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
    """A running daemon answers for the config it loaded, even if the file changed since."""
    mesh_env.write_config('[fleet]\nurl = "nats://127.0.0.1:9"\n')

    r = meshctl("fleet", "status", "--json", env=mesh_env.env)

    assert r.code == 0, r
    assert r.json()["configured"] is False
