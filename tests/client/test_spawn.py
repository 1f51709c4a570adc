"""Finding the daemon and starting it when none answers: real processes, real sockets."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from meshctl import Mesh, MeshUnavailable, _spawn


class TestAutostart:
    def test_starts_detached_daemon(self, mesh_env: Any, reap: list[int]) -> None:
        """No daemon: ping starts one in its own session, stdin on /dev/null, log in state."""
        assert not _spawn.daemon_running("test")

        with Mesh(autostart=True) as mesh:
            pong = mesh.ping()
            pid = mesh.info()["pid"]
        reap.append(pid)

        assert pong["pong"] is True
        assert pid != os.getpid()
        assert os.getsid(pid) != os.getsid(0)
        assert os.getpgid(pid) != os.getpgid(0)
        assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
        assert (mesh_env.state_dir / "test.log").exists()
        assert _spawn.daemon_running("test")

    def test_an_explicit_socket_is_the_one_a_started_daemon_serves(
        self, mesh_env: Any, reap: list[int], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``Mesh(socket=S)`` with no ``MESH_SOCKET`` starts a daemon serving S: the socket
        goes into that daemon's environment (the daemon served the standard socket and
        the client waited for S in vain, so the CLI put ``--socket`` into its own
        ``os.environ`` to pass it down; fails before). This process's environment is
        left as it was."""
        monkeypatch.delenv("MESH_SOCKET")
        explicit = mesh_env.socket.parent / "given.sock"

        with Mesh("test", socket=explicit, autostart=True) as mesh:
            info = mesh.info()
        reap.append(info["pid"])

        assert info["socket"] == str(explicit)
        assert explicit.is_socket()
        assert "MESH_SOCKET" not in os.environ

    def test_daemon_running_starts_nothing(self, mesh_env: Any) -> None:
        """daemon_running only looks: with no daemon it says False and leaves no trace."""
        assert _spawn.daemon_running("test") is False
        assert not mesh_env.socket.exists()
        assert not (mesh_env.state_dir / "test.log").exists()

    @pytest.mark.slow
    def test_racing_clients_start_one_daemon(self, mesh_env: Any, reap: list[int]) -> None:
        """Two clients in two processes, released together, start exactly one daemon."""
        go = mesh_env.root / "go"
        script = textwrap.dedent(f"""
            import logging, os, sys, time
            logging.basicConfig(level=logging.INFO, stream=sys.stderr)
            from meshctl import Mesh
            while not os.path.exists({str(go)!r}):
                time.sleep(0.001)
            print(Mesh(autostart=True).info()["pid"])
        """)
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script],
                env=mesh_env.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        go.touch()
        outs = [p.communicate(timeout=120) for p in procs]
        pids = {int(out) for out, _ in outs if out.strip()}
        reap.extend(pids)

        assert [p.returncode for p in procs] == [0, 0], outs
        assert len(pids) == 1
        assert sum(err.count("started meshd") for _, err in outs) == 1

    def test_failed_start_shows_log(self, mesh_env: Any) -> None:
        """A daemon that cannot start: MeshUnavailable quoting the end of its log."""
        mesh_env.write_config("[defaults]\nno_such_key = 1\n")

        with pytest.raises(MeshUnavailable) as info:
            Mesh(autostart=True).ping()

        message = info.value.message
        assert "could not start meshd" in message
        assert "no_such_key" in message
        assert "test.log" in message


class TestFindSocket:
    def test_recorded_socket_when_own_path_is_empty(
        self, daemon: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """A client whose own path has no socket (cron) uses the one the daemon recorded."""
        other = tmp_path / "run"
        other.mkdir(mode=0o700)
        monkeypatch.delenv("MESH_SOCKET")
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(other))

        found = _spawn.find_socket("test")
        with Mesh(autostart=False) as mesh:
            pid = mesh.info()["pid"]

        assert found == daemon.socket
        assert pid == daemon.proc.pid

    def test_explicit_wins(self, mesh_env: Any, tmp_path: Path) -> None:
        """An explicit socket is used as given."""
        assert _spawn.find_socket("test", tmp_path / "x.sock") == tmp_path / "x.sock"

    def test_unreachable_mentions_socket(self, mesh_env: Any) -> None:
        """Autostart off and nothing there: the message names the socket and the fix."""
        with pytest.raises(MeshUnavailable) as info:
            _spawn.connect_or_start("test", None, autostart=False)

        assert str(mesh_env.socket) in info.value.message
        assert "meshctl daemon start --profile test" in info.value.message
