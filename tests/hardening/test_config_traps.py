"""A config file that is a trap: a named pipe, a link to ``/dev/zero``, a huge file.

The daemon reads only a regular file of at most 1 MiB, opened non-blocking and
checked before a byte is read; at start anything else is refused with the file and
the reason, and at reload the old config stays (SPEC §2). Before, a named pipe as the
config froze the whole daemon at ``daemon reload`` until something wrote to it, and a
link to ``/dev/zero`` grew its memory without end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.conftest import DaemonHandle, MeshEnv
from tests.support import RpcClient, wait_for

GOOD = "[defaults]\nmax_body_bytes = 1234\n"


@pytest.fixture
def fifo_config(mesh_env: MeshEnv) -> Iterator[Callable[[], Path]]:
    """Turns the config path into a named pipe; unblocked on the way out, so a daemon
    that did open it for reading (the old behaviour) is not left stuck there."""

    def make() -> Path:
        mesh_env.config.unlink(missing_ok=True)
        os.mkfifo(mesh_env.config)
        return mesh_env.config

    yield make
    unblock(mesh_env.config)


def unblock(path: Path) -> None:
    """Open a named pipe for writing and close it: a reader stuck on it gets EOF."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass  # not a pipe any more, or nobody reading it


def reload_reply(d: DaemonHandle) -> dict[str, object]:
    """``mesh.reload`` on its own connection; the test fails (not hangs) if it never
    answers."""
    c = RpcClient(d, timeout=10)
    try:
        return c.raw("mesh.reload")
    finally:
        c.close()


class TestReload:
    def test_a_named_pipe_is_refused_and_the_daemon_keeps_serving(
        self, mesh_env: MeshEnv, daemon: DaemonHandle, fifo_config: Callable[[], Path]
    ) -> None:
        mesh_env.write_config(GOOD)
        assert reload_reply(daemon)["result"]["reloaded"] is True
        fifo_config()

        reply = reload_reply(daemon)
        pong = daemon.call("mesh.ping")

        result = reply["result"]
        assert result["reloaded"] is False
        assert result["error"] == (
            f"{mesh_env.config}: is a named pipe; meshd reads its config only from a regular file"
        )
        assert result["config"]["max_body_bytes"] == 1234  # the old config stays
        assert pong["result"]["pong"] is True

    def test_a_link_to_dev_zero_is_refused_at_once(
        self, mesh_env: MeshEnv, daemon: DaemonHandle
    ) -> None:
        mesh_env.write_config(GOOD)
        reload_reply(daemon)
        mesh_env.config.unlink()
        mesh_env.config.symlink_to("/dev/zero")

        result = reload_reply(daemon)["result"]

        assert result["reloaded"] is False
        assert "is a character device" in result["error"]
        assert result["config"]["max_body_bytes"] == 1234

    def test_a_file_over_1_mib_is_refused(self, mesh_env: MeshEnv, daemon: DaemonHandle) -> None:
        mesh_env.write_config(GOOD)
        reload_reply(daemon)
        mesh_env.write_config(GOOD + "#" * (1 << 20) + "\n")
        size = mesh_env.config.stat().st_size

        result = reload_reply(daemon)["result"]

        assert result["reloaded"] is False
        assert result["error"] == (
            f"{mesh_env.config}: is {size:,} bytes; a config file is at most "
            "1,048,576 bytes (1 MiB)"
        )
        assert result["config"]["max_body_bytes"] == 1234

    def test_a_file_of_exactly_1_mib_is_read(self, mesh_env: MeshEnv, daemon: DaemonHandle) -> None:
        text = GOOD + "#" * ((1 << 20) - len(GOOD) - 1) + "\n"
        mesh_env.write_config(text)
        assert len(text.encode()) == 1 << 20

        result = reload_reply(daemon)["result"]

        assert result["reloaded"] is True
        assert result["config"]["max_body_bytes"] == 1234

    def test_sighup_with_a_named_pipe_keeps_serving(
        self, daemon: DaemonHandle, fifo_config: Callable[[], Path]
    ) -> None:
        fifo_config()
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGHUP)

        pong = daemon.call("mesh.ping")

        assert pong["result"]["pong"] is True
        assert "is a named pipe" in _wait_for_log(daemon, "reload refused")


def _wait_for_log(d: DaemonHandle, text: str) -> str:
    return wait_for(lambda: next((ln for ln in d.logs().splitlines() if text in ln), None))


class TestStart:
    @pytest.mark.parametrize("trap", ["fifo", "dev_zero", "folder", "huge"])
    def test_a_trap_at_start_is_refused_with_the_file_and_the_reason(
        self, mesh_env: MeshEnv, trap: str
    ) -> None:
        path = mesh_env.config
        if trap == "fifo":
            os.mkfifo(path)
        elif trap == "dev_zero":
            path.symlink_to("/dev/zero")
        elif trap == "folder":
            path.mkdir()
        else:
            path.write_bytes(b"#" * ((1 << 20) + 1))
        try:
            done = subprocess.run(
                [sys.executable, "-m", "meshd", "run", "--profile", "test"],
                env=mesh_env.env,
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            )
        finally:
            if trap == "fifo":
                unblock(path)

        want = {
            "fifo": "is a named pipe",
            "dev_zero": "is a character device",
            "folder": "is a folder",
            "huge": "is 1,048,577 bytes",
        }[trap]
        assert done.returncode != 0, done
        assert f"{path}: {want}" in done.stderr, done.stderr
        assert not mesh_env.socket.exists()
