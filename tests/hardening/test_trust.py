"""The client trusts only its own daemon; the daemon binds only in a private folder.

Threat model (docs/SECURITY.md): processes of the same uid cooperate, every other uid
is hostile. Here a real second user (created with ``useradd``; root needed) runs a fake
daemon that records every byte it receives and answers with grants it never made. The
client must refuse it before sending anything, whichever way it found the socket.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.conftest import run_meshctl
from tests.conftest import DaemonHandle, MeshEnv, OtherUser
from tests.support import wait_for

from meshctl import Mesh, ProfileMismatch, UntrustedSocket

FAKE_DAEMON = r"""
import socket, sys
path, log = sys.argv[1], sys.argv[2]
srv = socket.socket(socket.AF_UNIX)
srv.bind(path)
os.chmod(path, 0o666)
srv.listen(16)
print("ready", flush=True)
GRANT = (b'{"jsonrpc":"2.0","id":1,"result":{"protocol_version":"1.0","profile":"test",'
         b'"pong":true,"granted":true,"session_id":"fake"}}\n')
while True:
    conn, _ = srv.accept()
    conn.settimeout(2)
    got = b""
    try:
        while chunk := conn.recv(65536):
            got += chunk
            conn.sendall(GRANT)
    except OSError:
        pass
    conn.close()
    with open(log, "a") as f:
        f.write(f"{len(got)}\n")
"""


class Fake:
    """A fake daemon run by the other user: where it listens and what it was sent."""

    def __init__(self, user: OtherUser, folder: Path) -> None:
        self.folder = folder
        self.socket = folder / "test.sock"
        self.log = folder / "received"
        self.log.touch()
        os.chown(self.log, user.uid, user.gid)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", user.code(FAKE_DAEMON), str(self.socket), str(self.log)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert self.proc.stdout is not None
            assert self.proc.stdout.readline().strip() == "ready"
        except BaseException:
            self.stop()  # no fixture teardown stops a fake that never got ready
            raise

    def received(self) -> list[int]:
        """Bytes received per finished connection."""
        return [int(n) for n in self.log.read_text().split()]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def public(short_tmp: Path) -> Path:
    """A sticky world-writable folder (like /tmp) inside this test's temp dir."""
    short_tmp.chmod(0o755)
    pub = short_tmp / "pub"
    pub.mkdir()
    pub.chmod(0o1777)
    return pub


@pytest.fixture
def fake(other_user: OtherUser, public: Path) -> Iterator[Fake]:
    """The other user's fake daemon, in a folder that user owns (mode 0777)."""
    folder = public / "evil"
    folder.mkdir()
    os.chown(folder, other_user.uid, other_user.gid)
    folder.chmod(0o777)
    f = Fake(other_user, folder)
    yield f
    f.stop()


def _no_daemon_env(mesh_env: MeshEnv) -> dict[str, str]:
    return {k: v for k, v in mesh_env.env.items() if k != "MESH_SOCKET"}


class TestClientChecksItsPeer:
    def test_folder_of_another_user_is_refused_before_connecting(
        self, mesh_env: MeshEnv, fake: Fake, other_user: OtherUser
    ) -> None:
        """A socket in another user's folder: refused, naming path and owner; nothing sent."""
        env = {**mesh_env.env, "MESH_SOCKET": str(fake.socket)}
        run = run_meshctl("register", "--task", "secret task", env=env)

        assert run.code == 69, run
        assert str(fake.folder) in run.err
        assert f"uid {other_user.uid} ({other_user.name})" in run.err
        assert "Traceback" not in run.err
        assert fake.received() == []

    def test_daemon_of_another_user_in_our_folder_is_refused(
        self, mesh_env: MeshEnv, fake: Fake, other_user: OtherUser
    ) -> None:
        """The folder is ours but the listener is not (swapped in after the folder check):
        SO_PEERCRED says who listens, and the client sends nothing."""
        mesh_env.socket.parent.mkdir(mode=0o700)
        os.rename(fake.socket, mesh_env.socket)

        with pytest.raises(UntrustedSocket) as refused:
            Mesh(autostart=False).ping()

        assert str(mesh_env.socket) in refused.value.message
        assert f"uid {other_user.uid} ({other_user.name})" in refused.value.message
        wait_for(lambda: fake.received() == [0])

    def test_recorded_socket_fallback_is_checked_too(
        self, mesh_env: MeshEnv, fake: Fake, other_user: OtherUser, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """No socket at our own path: the recorded one is subject to the same checks."""
        mesh_env.state_dir.mkdir(mode=0o700)
        (mesh_env.state_dir / "test.socket").write_text(f"{fake.socket}\n")
        monkeypatch.delenv("MESH_SOCKET")

        run = run_meshctl("register", "--task", "secret", env=_no_daemon_env(mesh_env))
        with pytest.raises(UntrustedSocket) as refused:
            Mesh(autostart=False).ping()

        assert run.code == 69, run
        assert str(fake.socket) in run.err
        assert f"uid {other_user.uid}" in refused.value.message
        assert fake.received() == []

    def test_recorded_socket_of_another_user_in_a_private_folder(
        self, mesh_env: MeshEnv, fake: Fake, other_user: OtherUser, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The record leads to a private folder of ours, but another user listens there."""
        private = mesh_env.root / "elsewhere"
        private.mkdir(mode=0o700)
        os.rename(fake.socket, private / "test.sock")
        mesh_env.state_dir.mkdir(mode=0o700)
        (mesh_env.state_dir / "test.socket").write_text(f"{private / 'test.sock'}\n")
        monkeypatch.delenv("MESH_SOCKET")

        with pytest.raises(UntrustedSocket) as refused:
            Mesh(autostart=False).ping()

        assert f"uid {other_user.uid} ({other_user.name})" in refused.value.message
        wait_for(lambda: fake.received() == [0])

    def test_no_runtime_dir_and_a_planted_fallback(
        self, mesh_env: MeshEnv, public: Path, other_user: OtherUser
    ) -> None:
        """The reported attack: XDG_RUNTIME_DIR unset, the other user pre-creates the
        fallback folder and runs a fake daemon there; `meshctl register` refuses it."""
        if os.path.exists(f"/run/user/{os.geteuid()}"):
            pytest.skip(f"/run/user/{os.geteuid()} exists, so the tempdir fallback is not used")
        base = public / f"runtime-{os.geteuid()}"
        for folder in (base, base / "meshd"):
            folder.mkdir()
            os.chown(folder, other_user.uid, other_user.gid)
            folder.chmod(0o777)
        f = Fake(other_user, base / "meshd")
        env = {k: v for k, v in mesh_env.env.items() if k not in ("MESH_SOCKET", "XDG_RUNTIME_DIR")}
        env["TMPDIR"] = str(public)
        try:
            run = run_meshctl("register", "--task", "secret", env=env)
            daemon = subprocess.run(
                [sys.executable, "-m", "meshd", "run", "--profile", "test"],
                env=env, capture_output=True, text=True, timeout=20,
            )  # fmt: skip
        finally:
            f.stop()

        assert run.code == 69, run
        assert f"{base / 'meshd'} is owned by uid {other_user.uid}" in run.err
        assert f.received() == []
        assert daemon.returncode == 1
        assert f"is owned by uid {other_user.uid}" in daemon.stderr
        assert daemon.stderr.count("\n") == 1, daemon.stderr

    def test_own_daemon_is_trusted(self, daemon: DaemonHandle) -> None:
        """The checks pass for the user's own daemon in its own folder."""
        with Mesh(autostart=False) as mesh:
            assert mesh.ping()["pong"] is True


class TestSocketPathAndProfile:
    def test_relative_socket_refused_by_the_client(
        self, mesh_env: MeshEnv, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A relative MESH_SOCKET (or --socket) is refused: it names a different socket in
        every working folder."""
        run = run_meshctl("sessions", "active", env={**mesh_env.env, "MESH_SOCKET": "rel.sock"})
        monkeypatch.setenv("MESH_SOCKET", "rel.sock")

        assert run.code == 2, run
        assert "absolute" in run.err
        with pytest.raises(ValueError, match="MESH_SOCKET must be an absolute path"):
            Mesh()

    def test_relative_socket_refused_by_the_daemon(self, mesh_env: MeshEnv) -> None:
        """The daemon refuses it in one sentence and binds nothing in its working folder."""
        cwd = mesh_env.root / "cwd"
        cwd.mkdir()
        out = subprocess.run(
            [sys.executable, "-m", "meshd", "run", "--profile", "test"],
            env={**mesh_env.env, "MESH_SOCKET": "rel.sock"},
            cwd=cwd, capture_output=True, text=True, timeout=20,
        )  # fmt: skip

        assert out.returncode == 1
        assert "MESH_SOCKET must be an absolute path" in out.stderr
        assert out.stderr.count("\n") == 1, out.stderr
        assert list(cwd.iterdir()) == []

    @pytest.mark.parametrize(
        ("var", "what"), [("MESH_STATE_DIR", "state folder"), ("MESH_CONFIG", "config file")]
    )
    def test_relative_state_dir_or_config_refused_by_the_client(
        self, mesh_env: MeshEnv, monkeypatch: pytest.MonkeyPatch, var: str, what: str
    ) -> None:
        """A relative MESH_STATE_DIR or MESH_CONFIG splits the profile in two: meshctl
        resolved it in its working folder (spawn lock, log, the config doctor checks),
        the daemon it started in ``/`` (database, the config it loads). Refused as a
        relative MESH_SOCKET is, by the fast path and click alike, before anything runs."""
        cwd = mesh_env.root / "cwd"
        cwd.mkdir()
        env = {**mesh_env.env, var: "rel-tour-x", "MESH_SPAWN": "direct"}
        runs = [
            subprocess.run(
                [sys.executable, "-m", "meshctl.cli", *args],
                env=env,
                cwd=cwd,
                capture_output=True,
                text=True,
                timeout=30,
            )
            for args in (["sessions", "active"], ["claim", "port:1"], ["doctor"])
        ]
        monkeypatch.setenv(var, "rel-tour-x")

        for run in runs:
            assert run.returncode == 2, run
            assert f"{var} must be an absolute path, not 'rel-tour-x'" in run.stderr
            assert f"different {what}" in run.stderr
            assert "Traceback" not in run.stderr
        assert list(cwd.iterdir()) == []
        assert not mesh_env.socket.exists()
        with pytest.raises(ValueError, match=f"{var} must be an absolute path"):
            Mesh()

    @pytest.mark.parametrize("var", ["MESH_STATE_DIR", "MESH_CONFIG"])
    def test_relative_state_dir_or_config_refused_by_the_daemon(
        self, mesh_env: MeshEnv, var: str
    ) -> None:
        """``meshd run`` refuses it in one sentence and creates nothing."""
        cwd = mesh_env.root / "cwd"
        cwd.mkdir()

        out = _start({**mesh_env.env, var: "rel-tour-x"}, cwd)

        assert out.returncode == 1
        assert out.stderr.startswith(f"meshd: {var} must be an absolute path"), out.stderr
        assert out.stderr.count("\n") == 1, out.stderr
        assert list(cwd.iterdir()) == []

    def test_profile_that_the_socket_does_not_serve_is_refused(self, daemon: DaemonHandle) -> None:
        """MESH_SOCKET names the daemon of profile `test`; asking it for profile `other`
        says so instead of silently answering for `test`."""
        run = run_meshctl("--profile", "other", "sessions", "active", env=daemon.env)

        assert run.code == 69, run
        assert "serves profile 'test', not 'other'" in run.err
        with pytest.raises(ProfileMismatch):
            Mesh("other", autostart=False).ping()
        with Mesh("test", autostart=False) as mesh:
            assert mesh.ping()["pong"] is True


def _start(env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meshd", "run", "--profile", "test"],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=20,
    )  # fmt: skip


class TestStartupRefusals:
    """Each refusal is one sentence on stderr, exit 1, with the right fix."""

    def test_folder_open_to_others(self, mesh_env: MeshEnv) -> None:
        folder = mesh_env.socket.parent
        folder.mkdir(mode=0o700)
        folder.chmod(0o755)
        out = _start(mesh_env.env)

        assert out.returncode == 1
        assert f"run chmod 0700 '{folder}'" in out.stderr
        assert out.stderr.count("\n") == 1, out.stderr

    def test_symlinked_folder(self, mesh_env: MeshEnv, short_tmp: Path) -> None:
        """A symlink to a shared folder such as /tmp: refused, and no chmod advice."""
        shared = short_tmp / "shared"
        shared.mkdir()
        shared.chmod(0o1777)
        mesh_env.socket.parent.symlink_to(shared)
        out = _start(mesh_env.env)

        assert out.returncode == 1
        assert f"{mesh_env.socket.parent} is a symlink (to {shared})" in out.stderr
        assert "chmod" not in out.stderr
        assert out.stderr.count("\n") == 1, out.stderr
        assert list(shared.iterdir()) == []

    @pytest.mark.parametrize("kind", ["file", "folder", "symlink"])
    def test_something_else_at_the_socket_path(self, mesh_env: MeshEnv, kind: str) -> None:
        mesh_env.socket.parent.mkdir(mode=0o700)
        if kind == "file":
            mesh_env.socket.write_text("keep me")
        elif kind == "folder":
            mesh_env.socket.mkdir()
        else:
            mesh_env.socket.symlink_to(mesh_env.root / "elsewhere.sock")
        out = _start(mesh_env.env)

        assert out.returncode == 1
        assert f"{mesh_env.socket} is a {kind}" in out.stderr
        assert "Traceback" not in out.stderr
        assert out.stderr.count("\n") == 1, out.stderr
        if kind == "file":
            assert mesh_env.socket.read_text() == "keep me"

    def test_folder_of_another_user(self, mesh_env: MeshEnv, other_user: OtherUser) -> None:
        folder = mesh_env.socket.parent
        folder.mkdir(mode=0o700)
        os.chown(folder, other_user.uid, other_user.gid)
        out = _start(mesh_env.env)

        assert out.returncode == 1
        assert f"{folder} is owned by uid {other_user.uid} ({other_user.name})" in out.stderr
        assert out.stderr.count("\n") == 1, out.stderr

    def test_stale_socket_is_replaced(self, mesh_env: MeshEnv) -> None:
        """A socket nobody listens on (left by kill -9) is replaced at start."""
        mesh_env.socket.parent.mkdir(mode=0o700)
        with socket.socket(socket.AF_UNIX) as dead:
            dead.bind(str(mesh_env.socket))
        d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
        d.start()
        try:
            assert d.call("mesh.ping")["result"]["pong"] is True
        finally:
            d.stop()

    def test_another_profile_serving_the_same_socket(self, daemon: DaemonHandle) -> None:
        """A second profile given the same MESH_SOCKET refuses to start; the first serves on."""
        ino = daemon.socket.stat().st_ino
        out = subprocess.run(
            [sys.executable, "-m", "meshd", "run", "--profile", "other"],
            env=daemon.env, capture_output=True, text=True, timeout=20,
        )  # fmt: skip

        assert out.returncode == 1
        assert daemon.proc is not None
        assert f"another meshd (pid {daemon.proc.pid}) serves {daemon.socket}" in out.stderr
        assert out.stderr.count("\n") == 1, out.stderr
        assert daemon.socket.stat().st_ino == ino
        assert daemon.call("mesh.info")["result"]["profile"] == "test"
