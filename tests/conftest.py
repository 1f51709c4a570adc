"""Shared fixtures: a short private temp dir, the MESH_* environment, a real daemon.

Sockets need short paths (sun_path is 108 bytes) and pytest's ``tmp_path`` is
too long for them, so every test gets a ``tempfile.mkdtemp`` under /tmp
(anyio's own socket tests do the same).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.leaks import pytest_runtest_makereport, pytest_runtest_teardown  # noqa: F401 (hooks)
from tests.support import TIMEOUT

TEST_TIMEOUT = 300.0
"""Seconds one test may take before pytest-timeout fails it with every thread's
traceback (a hang in CI is a failure that says where, not a job killed at 6 h)."""

SLOW_TEST_TIMEOUT = 900.0
"""For tests marked ``slow``: they are long by design (thousands of fuzzed frames, big
queues), and on a loaded 2-core machine 300 s cut one off mid-run (a clean-clone CI
at load 20). A hang still fails, with tracebacks, just later."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each test the default timeout, unless ``--timeout`` or its own mark says
    otherwise. Set here, not in pyproject's ini, so a venv that predates the plugin
    (``--strict-config`` refuses an unknown ``timeout`` key) still runs the suite."""
    if not config.pluginmanager.hasplugin("timeout") or config.getoption("timeout", None):
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            slow = item.get_closest_marker("slow") is not None
            item.add_marker(pytest.mark.timeout(SLOW_TEST_TIMEOUT if slow else TEST_TIMEOUT))


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return ("asyncio", {"debug": True})


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A 0700 temp dir with a short path, removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix="mt-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@dataclass
class MeshEnv:
    """Where one test's mesh lives, and the environment that points there."""

    root: Path
    socket: Path
    state_dir: Path
    config: Path
    runtime: Path
    env: dict[str, str] = field(default_factory=dict)

    def write_config(self, text: str) -> None:
        self.config.write_text(text)


@pytest.fixture
def mesh_env(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> MeshEnv:
    runtime = short_tmp / "run"
    runtime.mkdir(mode=0o700)
    me = MeshEnv(
        root=short_tmp,
        socket=runtime / "meshd" / "test.sock",
        state_dir=short_tmp / "state",
        config=short_tmp / "config.toml",
        runtime=runtime,
    )
    values = {
        "MESH_SOCKET": str(me.socket),
        "MESH_STATE_DIR": str(me.state_dir),
        "MESH_CONFIG": str(me.config),
        "XDG_RUNTIME_DIR": str(runtime),
        "MESH_PROFILE": "test",
    }
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("MESH_SESSION", raising=False)
    # Subprocesses (meshd, meshctl) may cache bytecode: without it every one of the
    # hundreds of subprocesses compiles the packages again (~20 ms each).
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    me.env = {**os.environ, **values}
    return me


def rpc(
    sock_path: Path, method: str, params: dict[str, Any] | None = None, timeout: float = TIMEOUT
) -> Any:
    """One raw JSON-RPC call over a fresh connection (stdlib only); returns the reply.
    ``timeout`` bounds each socket operation: a call that waits (``wait``) needs more."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(str(sock_path))
        req: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
        if params is not None:
            req["params"] = params
        s.sendall(json.dumps(req).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf)


@dataclass
class DaemonHandle:
    """A real ``meshd run`` subprocess for one test."""

    env: dict[str, str]
    socket: Path
    state_dir: Path
    profile: str = "test"
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    wrap: list[str] = field(default_factory=list)
    """A command prefix (``ip netns exec NS``: the fleet tests' hosts); it must exec."""

    def meshd_argv(self) -> list[str]:
        """How meshd is started; a subclass runs a launcher instead (one that sets a
        limit or a debug flag up, then runs meshd with the arguments after its own)."""
        return [sys.executable, "-m", "meshd"]

    def start(self, *, wait: bool = True) -> None:
        self.log = self.state_dir.parent / f"meshd-{self.profile}.log"
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            [
                *self.wrap,
                *self.meshd_argv(),
                "run",
                "--profile",
                self.profile,
                "--log-level",
                "debug",
            ],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
        out.close()
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"meshd exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                if rpc(self.socket, "mesh.ping")["result"]["pong"]:
                    return
            except (OSError, ValueError, KeyError):
                time.sleep(0.02)
        raise RuntimeError(f"meshd did not answer within {timeout}s:\n{self.logs()}")

    def logs(self) -> str:
        return self.log.read_text() if self.log and self.log.exists() else ""

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return rpc(self.socket, method, params)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=60)

    def kill(self) -> int:
        return self.stop(signal.SIGKILL)

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture
def daemon(mesh_env: MeshEnv) -> Iterator[DaemonHandle]:
    """The real daemon serving profile ``test`` in this test's private folders."""
    d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
    d.start()
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.stop()


@dataclass(frozen=True)
class OtherUser:
    """A second, throwaway local user: what "another uid" means in the security tests."""

    uid: int
    gid: int
    name: str

    def code(self, body: str) -> str:
        """Python source that drops from root to this user, then runs ``body``.

        The modules ``body`` may use are imported first, as root: the interpreter's own
        files may not be readable by the new user.
        """
        return (
            "import json, os, socket, sys, time\n"
            f"os.setgroups([]); os.setgid({self.gid}); os.setuid({self.uid})\n{body}"
        )


@pytest.fixture(scope="session")
def other_user() -> Iterator[OtherUser]:
    """A user created with ``useradd`` for this test run and deleted afterwards.

    Needs root (CI runs as root, so there these tests run; as root, failing to create
    the user is an error, never a skip).
    """
    if os.geteuid() != 0:
        pytest.skip("needs root: creates a second user with useradd and acts as it")
    import pwd

    name = f"mesh{os.getpid()}"
    for attempt in range(20):  # parallel workers may hold the passwd lock for a moment
        made = subprocess.run(
            ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group", name],
            capture_output=True,
            text=True,
            check=False,
        )
        if made.returncode == 0:
            break
        time.sleep(0.1 * (attempt + 1))
    else:
        raise RuntimeError(f"useradd {name} failed: {made.stderr}")
    try:
        pw = pwd.getpwnam(name)
        yield OtherUser(pw.pw_uid, pw.pw_gid, name)
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)
