"""The socket survives a logout clean-up, and two daemons never fight over one path.

SPEC §2: if the socket file is removed under the daemon, it creates it again. What sits
at the path and is not free (another live daemon, a file, a folder) is left alone and
reported once. Re-binding is atomic (bind a temporary name, rename it into place) and
closes the listener it replaces.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import stat
import threading
from pathlib import Path

import anyio
import pytest
from tests.conftest import DaemonHandle, MeshEnv, rpc
from tests.support import wait_for

from meshd.server import socketfile


def replaced(path: Path, ino: int) -> bool:
    """Whether ``path`` is a socket file again, not the one with inode ``ino``."""
    return path.exists() and path.stat().st_ino != ino


LISTENING = 0x00010000  # __SO_ACCEPTCON in /proc/net/unix


def listeners(pid: int) -> int:
    """How many listening Unix sockets process ``pid`` holds."""
    listening = set()
    with open("/proc/net/unix") as table:
        next(table)
        for row in table:
            cols = row.split()
            if int(cols[3], 16) & LISTENING:
                listening.add(cols[6])
    held = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in listening:
            held += 1
    return held


def answers(path: Path, profile: str = "test") -> bool:
    try:
        return bool(rpc(path, "mesh.info")["result"]["profile"] == profile)
    except (OSError, ValueError, KeyError):
        return False


def pid_of(d: DaemonHandle) -> int:
    assert d.proc is not None
    return d.proc.pid


class TestLogoutCleanUp:
    def test_folder_removed(self, daemon: DaemonHandle) -> None:
        """`rm -rf $XDG_RUNTIME_DIR/meshd`: folder (0700) and socket come back; one listener."""
        shutil.rmtree(daemon.socket.parent)

        wait_for(lambda: answers(daemon.socket))
        assert daemon.proc is not None
        assert daemon.proc.poll() is None
        assert stat.S_IMODE(daemon.socket.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(daemon.socket.stat().st_mode) == 0o600
        assert listeners(pid_of(daemon)) == 1

    def test_socket_removed_twice_closes_each_replaced_listener(self, daemon: DaemonHandle) -> None:
        for _ in range(2):
            ino = daemon.socket.stat().st_ino
            daemon.socket.unlink()
            wait_for(functools.partial(replaced, daemon.socket, ino))
            wait_for(lambda: answers(daemon.socket))

        assert listeners(pid_of(daemon)) == 1

    @pytest.mark.parametrize("kind", ["file", "folder"])
    def test_replaced_by_something_else(self, daemon: DaemonHandle, kind: str) -> None:
        """A file or folder put at the path: the daemon lives on, says so once, keeps what
        was put there, and re-creates the socket once it is gone."""
        daemon.socket.unlink()
        if kind == "file":
            daemon.socket.write_text("keep me")
        else:
            daemon.socket.mkdir()
            (daemon.socket / "inside").write_text("keep me")

        wait_for(lambda: f"{daemon.socket} is a {kind}, not a socket" in daemon.logs())
        assert daemon.proc is not None
        assert daemon.proc.poll() is None
        kept = daemon.socket if kind == "file" else daemon.socket / "inside"
        assert kept.read_text() == "keep me"

        if kind == "folder":
            shutil.rmtree(daemon.socket)
        else:
            daemon.socket.unlink()
        wait_for(lambda: answers(daemon.socket))
        assert daemon.logs().count(f"is a {kind}, not a socket") == 1
        assert listeners(pid_of(daemon)) == 1

    def test_stale_socket_is_replaced(self, daemon: DaemonHandle) -> None:
        """A dead socket at the path (nobody listens) is replaced by a live one."""
        daemon.socket.unlink()
        with socket.socket(socket.AF_UNIX) as dead:
            dead.bind(str(daemon.socket))
        wait_for(lambda: answers(daemon.socket))


class TestSharedSocket:
    def test_two_daemons_never_fight(self, mesh_env: MeshEnv, daemon: DaemonHandle) -> None:
        """Profiles `test` and `other` given one MESH_SOCKET: whoever holds the path keeps
        it; the other says so, leaks nothing, and takes it again only once it is free."""
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGSTOP)  # so `other` binds the free path first
        try:
            daemon.socket.unlink()
            other = DaemonHandle(
                env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir,
                profile="other",
            )  # fmt: skip
            other.start(wait=False)
            wait_for(lambda: answers(daemon.socket, "other"))
        finally:
            daemon.proc.send_signal(signal.SIGCONT)
        ino = daemon.socket.stat().st_ino
        assert other.proc is not None
        pid = other.proc.pid

        wait_for(lambda: f"another meshd (pid {pid}) serves" in daemon.logs())
        assert daemon.socket.stat().st_ino == ino
        assert answers(daemon.socket, "other")
        assert listeners(pid_of(daemon)) == 1

        other.stop()
        wait_for(lambda: answers(daemon.socket, "test"))
        assert daemon.logs().count("another meshd") == 1
        assert listeners(pid_of(daemon)) == 1


class TestAtomicBind:
    async def test_rebinding_never_leaves_the_path_refusing(self, short_tmp: Path) -> None:
        """Replacing the socket 200 times while a client connects in a loop: every connect
        finds a listening socket (no missing path, no refused connection)."""
        path = short_tmp / "s.sock"
        listener = await socketfile.bind(path)
        failures: list[str] = []
        stop = threading.Event()

        def hammer() -> None:
            while not stop.is_set():
                with socket.socket(socket.AF_UNIX) as c:
                    try:
                        c.connect(str(path))
                    except OSError as exc:
                        failures.append(os.strerror(exc.errno or 0))

        thread = threading.Thread(target=hammer)
        thread.start()
        try:
            for _ in range(200):
                old, listener = listener, await socketfile.bind(path)
                await old.aclose()
                await anyio.sleep(0)
        finally:
            stop.set()
            thread.join()
            await listener.aclose()

        assert failures == []
        assert sorted(p.name for p in short_tmp.iterdir()) == ["s.sock"]
