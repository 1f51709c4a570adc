"""An installation without the ``[fleet]`` extra: ``fleet join`` changes nothing and
names the extra; ``doctor`` names it too, instead of suggesting to start nats-server.

The extra's absence is made real for the processes under test by a ``sitecustomize``
on ``PYTHONPATH`` that puts a finder first on ``sys.meta_path`` refusing ``nats``
exactly as a missing package is refused (ModuleNotFoundError naming it): the venv the
tests run in has nats-py, which the fleet tests need.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import Meshctl
from tests.conftest import DaemonHandle
from tests.support import wait_for


@pytest.fixture
def without_nats(short_tmp: Path) -> dict[str, str]:
    """``PYTHONPATH`` for a process in which nats-py is not there to find or import."""
    folder = short_tmp / "no-extra"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(NO_NATS)
    return {"PYTHONPATH": str(folder)}


NO_NATS = """
import sys


class NoNats:
    def find_spec(self, name, path=None, target=None):
        if name == "nats" or name.startswith("nats."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoNats())
"""


def test_join_without_the_extra_changes_nothing(
    meshctl: Meshctl, offline_env: Any, without_nats: dict[str, str]
) -> None:
    env = {**offline_env.env, **without_nats}
    config = Path(env["MESH_CONFIG"])

    r = meshctl("fleet", "join", "nats://127.0.0.1:4222", env=env)

    assert r.code == 1, r
    assert "joining a fleet needs the [fleet] extra (nats-py)" in r.err
    assert "no module named 'nats'); nothing was changed" in r.err
    assert "-m pip install 'session-mesh[fleet]'" in r.err
    assert not config.exists()
    assert "Traceback" not in r.err


def test_join_without_the_extra_json(
    meshctl: Meshctl, offline_env: Any, without_nats: dict[str, str]
) -> None:
    r = meshctl(
        "fleet", "join", "nats://127.0.0.1:4222", "--json", env={**offline_env.env, **without_nats}
    )

    assert r.code == 1, r
    assert r.json()["error"]["data"]["code"] == "FLEET_EXTRA_MISSING"


def test_doctor_names_the_extra(
    meshctl: Meshctl, mesh_env: Any, without_nats: dict[str, str]
) -> None:
    """[fleet] written by hand, a daemon without nats-py: doctor says to install the
    extra, not to start nats-server."""
    mesh_env.write_config('[fleet]\nurl = "nats://127.0.0.1:4222"\n')
    env = {**mesh_env.env, **without_nats}
    d = DaemonHandle(env=env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
    d.start()
    try:
        wait_for(lambda: d.call("fleet.status")["result"].get("last_error"))

        r = meshctl("doctor", env=env)

        assert r.code == 1, r
        assert (
            "[fleet] is configured but the daemon cannot load the fleet client "
            "(no module named 'nats'); this host's mesh works alone meanwhile"
        ) in r.out
        assert "install the [fleet] extra: " in r.out
        assert "start nats-server" not in r.out
    finally:
        d.stop()


def test_the_daemon_says_the_extra_in_one_line(
    meshctl: Meshctl, mesh_env: Any, without_nats: dict[str, str]
) -> None:
    """The daemon's own word for a [fleet] it cannot load: the extra and the command that
    adds it, in its status and in its log; no traceback, no bare ModuleNotFoundError."""
    mesh_env.write_config('[fleet]\nurl = "nats://127.0.0.1:4222"\n')
    env = {**mesh_env.env, **without_nats}
    d = DaemonHandle(env=env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
    d.start()
    try:
        error = wait_for(lambda: d.call("fleet.status")["result"].get("last_error"))
        shown = meshctl("fleet", "status", env=env)
    finally:
        d.stop()

    assert error.startswith(
        "the [fleet] extra (nats-py) is not installed where meshd runs (no module named "
        "'nats'): install it with: "
    ), error
    assert "-m pip install 'session-mesh[fleet]', then `meshctl daemon restart`" in error
    assert error in shown.out
    assert d.log is not None
    log = d.log.read_text()
    assert "the [fleet] extra (nats-py) is not installed" in log, log
    assert "Traceback" not in log
    assert "ModuleNotFoundError" not in log


def test_the_daemon_and_meshctl_name_the_same_command() -> None:
    """Two copies (meshctl imports nothing of the daemon but the contract): one answer."""
    from meshctl.cli.admin import fleet_extra
    from meshd.fleet import extra

    assert extra.install_hint() == fleet_extra.install_hint()
    assert fleet_extra.install_hint() in extra.not_installed("nats")
