"""``--socket`` reaches what the command starts, without the CLI writing its own environment."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from tests.conftest import rpc
from tests.support import wait_for

from meshctl.cli._state import State


def test_the_state_s_client_leaves_the_environment_alone(
    mesh_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client for ``--socket S`` gets S as its argument; ``os.environ`` is not
    written to pass it down (it was: ``MESH_SOCKET`` set in the CLI's own process;
    fails before)."""
    monkeypatch.delenv("MESH_SOCKET")
    state = State()
    state.profile, state.socket = "test", str(mesh_env.socket.parent / "given.sock")

    mesh = state.mesh(autostart=False)

    assert mesh.socket_path == state.socket
    assert "MESH_SOCKET" not in os.environ


def test_socket_option_reaches_the_started_daemon_and_run_s_command(
    mesh_env: Any, meshctl: Any
) -> None:
    """``meshctl --socket S run --res res:x -- sh -c 'printf %s "$MESH_SOCKET"'`` with no
    ``MESH_SOCKET`` set: the daemon it starts serves S, and COMMAND is told S (as
    before, now passed explicitly to each)."""
    given = mesh_env.socket.parent / "given.sock"
    env = {k: v for k, v in mesh_env.env.items() if k != "MESH_SOCKET"}
    env["MESH_SPAWN"] = "direct"

    done = meshctl(
        "--socket",
        str(given),
        "run",
        "--res",
        "res:x",
        "--",
        "sh",
        "-c",
        'printf %s "$MESH_SOCKET"',
        env=env,
    )
    assert done.code == 0, done
    pid = rpc(given, "mesh.info")["result"]["pid"]
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"))

    assert done.code == 0, done
    assert done.out == str(given)


def test_status_at_a_wrong_socket_names_the_recorded_one(
    mesh_env: Any, meshctl: Any, daemon: Any
) -> None:
    """A daemon runs, MESH_SOCKET names another path: ``daemon status`` says where the
    profile's daemon is (the socket it recorded) and how to reach it, not "start it"
    (a start would be refused: the profile's daemon runs)."""
    wrong = mesh_env.socket.parent / "wrong.sock"
    env = {**mesh_env.env, "MESH_SOCKET": str(wrong)}

    r = meshctl("daemon", "status", env=env)
    j = meshctl("daemon", "status", "--json", env=env)

    assert r.code == 69, r
    assert (
        f"no meshd answers on {wrong}, but the daemon of profile test serves "
        f"{mesh_env.socket} (its recorded socket)"
    ) in r.err
    assert f"set MESH_SOCKET={mesh_env.socket} or unset MESH_SOCKET" in r.err
    assert "start it with" not in r.err
    assert j.json()["error"]["data"]["recorded_socket"] == str(mesh_env.socket)
