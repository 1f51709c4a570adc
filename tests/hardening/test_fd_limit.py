"""The connection limit follows the open-file limit (RLIMIT_NOFILE), with a reserve.

A daemon started under ``ulimit -n 64`` with 200 idle connections used to leave new
clients waiting, unanswered, until some closed: ``accept`` failed with EMFILE and was
retried every 100 ms. Now it takes at most what the limit leaves after a reserve
(the database, the log, the fleet, watched processes), refuses the next connection
at once with ``UNAVAILABLE`` naming the limit, and says the limit in ``mesh.info``
(``daemon status``, ``doctor``).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import anyio
import pytest
from tests.conftest import MeshEnv
from tests.hardening.support import LimitedDaemon, raise_own_nofile
from tests.support import wait_for

from meshctl import AsyncMesh, Mesh, MeshError, MeshUnavailable

PING = b'{"jsonrpc":"2.0","id":1,"method":"mesh.ping"}\n'
INFO = b'{"jsonrpc":"2.0","id":1,"method":"mesh.info"}\n'


def first_line(s: socket.socket, request: bytes) -> dict[str, object]:
    """``request`` on ``s``; its first reply line (the test fails on a timeout)."""
    try:
        s.sendall(request)
    except BrokenPipeError:
        pass  # refused and closed already: its line is still there to read
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(65536)
        assert chunk, f"closed without a reply after {buf!r}"
        buf += chunk
    reply: dict[str, object] = json.loads(buf.splitlines()[0])
    return reply


def test_past_the_open_file_limit_a_client_is_refused_at_once(mesh_env: MeshEnv) -> None:
    raise_own_nofile(1024)
    d = LimitedDaemon(env=mesh_env.env, socket=mesh_env.socket,
                      state_dir=mesh_env.state_dir, nofile=64)  # fmt: skip
    d.start()
    held: list[socket.socket] = []
    try:
        info = d.call("mesh.info")["result"]
        limits = info["limits"]
        # 200 idle connections, each answered (served or refused) before the next
        refusals = []
        for _ in range(200):
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(5)  # an answer comes at once, or the test fails
            s.connect(str(d.socket))
            reply = first_line(s, PING)
            held.append(s)
            if "error" in reply:
                refusals.append(reply)
        served = 200 - len(refusals)
        status = subprocess.run(
            [sys.executable, "-m", "meshctl.cli", "daemon", "status"],
            env={**mesh_env.env, "MESH_SPAWN": "direct"},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        for s in held:
            s.close()
    try:
        wait_for(lambda: "result" in d.call("mesh.ping"))
        after = d.call("mesh.info")["result"]["limits"]
    finally:
        d.stop()

    assert limits["open_files"] == 64
    assert 1 <= limits["connections"] < 64
    assert limits["connections"] + limits["reserved_files"] <= 64
    # the start's and the info's connections may not be seen closed yet
    assert limits["connections"] - 2 <= served <= limits["connections"]
    err = refusals[0]["error"]
    assert isinstance(err, dict)
    assert err["data"] == {
        "reason": "open_files", "limit": limits["connections"], "rlimit_nofile": 64,
        "code": "UNAVAILABLE",
    }  # fmt: skip
    assert "its open-file limit RLIMIT_NOFILE is 64" in err["message"]
    assert status.returncode != 0
    assert "too many connections" in status.stderr, status.stderr
    assert after == limits


def test_the_limit_is_in_daemon_status_and_doctor(mesh_env: MeshEnv) -> None:
    d = LimitedDaemon(env=mesh_env.env, socket=mesh_env.socket,
                      state_dir=mesh_env.state_dir, nofile=128)  # fmt: skip
    d.start()
    try:
        limits = d.call("mesh.info")["result"]["limits"]
        run = [sys.executable, "-m", "meshctl.cli"]
        env = {**mesh_env.env, "MESH_SPAWN": "direct"}
        status = subprocess.run([*run, "daemon", "status"], env=env, capture_output=True,
                                text=True, timeout=60, check=False)  # fmt: skip
        doctor = subprocess.run([*run, "doctor", "--json"], env=env, capture_output=True,
                                text=True, timeout=60, check=False)  # fmt: skip
    finally:
        d.stop()

    want = (
        f"at most {limits['connections']} connections (open-file limit 128, "
        f"{limits['reserved_files']} kept back)"
    )
    assert want in status.stdout, status
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["connections"]["status"] == "warn"
    assert (
        f"at most {limits['connections']} at once (open-file limit 128"
        in (checks["connections"]["message"])
    )
    assert "ulimit -n" in checks["connections"]["fix"]


def fill(d: LimitedDaemon) -> list[socket.socket]:
    """Idle connections to ``d``, held open, up to and including the first it refuses
    (a refused one counts until it closes, so the next is refused too)."""
    held: list[socket.socket] = []
    while True:
        s = socket.socket(socket.AF_UNIX)
        held.append(s)
        s.settimeout(5)
        s.connect(str(d.socket))
        if "error" in first_line(s, PING):
            return held


async def through_asyncmesh(fail_open: bool) -> object:
    """``mesh.ping`` through an AsyncMesh (autostart off)."""
    async with AsyncMesh(autostart=False, fail_open=fail_open) as mesh:
        return await mesh.ping()


class TestBothClientsShowTheRefusal:
    def test_asyncmesh_says_what_mesh_says(self, mesh_env: MeshEnv) -> None:
        """Past the daemon's open-file limit, AsyncMesh raises the daemon's own refusal
        (MeshUnavailable, "too many connections …"), as the blocking Mesh does, and
        with ``fail_open`` both return None."""
        raise_own_nofile(1024)
        d = LimitedDaemon(env=mesh_env.env, socket=mesh_env.socket,
                          state_dir=mesh_env.state_dir, nofile=64)  # fmt: skip
        d.start()
        held: list[socket.socket] = []
        try:
            held = fill(d)
            with pytest.raises(MeshError) as blocking:
                Mesh(autostart=False).ping()
            with pytest.raises(MeshError) as anyio_side:
                anyio.run(through_asyncmesh, False)
            with Mesh(autostart=False, fail_open=True) as mesh:
                blocking_open = mesh.ping()
            async_open = anyio.run(through_asyncmesh, True)
        finally:
            for s in held:
                s.close()
            d.stop()

        assert isinstance(blocking.value, MeshUnavailable)
        assert "too many connections" in blocking.value.message
        assert type(anyio_side.value) is type(blocking.value)
        assert anyio_side.value.message == blocking.value.message
        assert anyio_side.value.data == blocking.value.data
        assert blocking_open is None
        assert async_open is None
