"""A hung daemon (SIGSTOP) against the blocking client: failing open
treats a timeout like unavailability, and leaving a block never raises for a release
or an end that could not be sent -- it says so."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from tests.support import as_at_a_terminal, reaped

from meshctl import Mesh


@contextmanager
def stopped(daemon: Any) -> Iterator[None]:
    """The daemon SIGSTOPped (its socket still accepts; nothing answers), then resumed."""
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)


def test_fail_open_session_starts_on_a_hung_daemon(
    daemon: Any, caplog: pytest.LogCaptureFixture
) -> None:
    mesh = Mesh(fail_open=True, timeout=0.3, autostart=False)
    with (
        stopped(daemon),
        caplog.at_level(logging.WARNING, "meshctl"),
        mesh.session(task="t") as s,
        s.claim("res:x") as c,
    ):
        active, granted, guarded = s.active, c.granted, c.guarded
    mesh.close()

    assert (active, granted, guarded) == (False, True, False)
    assert "continuing without it (fail_open)" in caplog.text


def test_leaving_blocks_never_raises_on_a_hung_daemon(
    daemon: Any, caplog: pytest.LogCaptureFixture
) -> None:
    mesh = Mesh(timeout=0.3, autostart=False)
    try:
        with (
            caplog.at_level(logging.WARNING, "meshctl"),
            mesh.session(task="t", heartbeat_interval=3600) as s,
            s.claim("res:y") as c,
        ):
            assert c.granted
            os.kill(daemon.proc.pid, signal.SIGSTOP)
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    mesh.close()

    assert c.release_failed is not None
    assert "could not release res:y" in c.release_failed
    assert "could not release res:y" in caplog.text
    assert "could not end session" in caplog.text


_INTERRUPTED = """
import signal, sys, threading, time
from meshctl import Mesh

mesh = Mesh(autostart=False, timeout=60)
# A second thread takes the SIGINT (the main thread blocks it), so the main thread's
# wait is never cut short by the signal: the race in which a signal lands between
# Python's last check and the system call, made certain.
threading.Thread(target=time.sleep, args=(120,), daemon=True).start()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
print("ready", flush=True)
start = time.monotonic()
try:
    mesh.call("session.list")
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - start:.1f} s", flush=True)
    sys.exit(130)
"""


def test_ctrl_c_is_seen_within_a_second_however_long_the_wait(daemon: Any) -> None:
    """A signal that trips Python's flag while the main thread sits in ``recv`` without
    being woken (it landed on another thread, or just before the system call) is seen
    at the next wake-up: a read waits in slices of at most a second, not the whole
    timeout."""
    import subprocess
    import sys
    import time

    # The daemon is stopped before the child starts: its call can never be answered
    # before the test looks (on a loaded machine a child that said "ready" may be done
    # with a call to a running daemon before the test could stop it).
    with stopped(daemon):
        proc = subprocess.Popen(
            as_at_a_terminal([sys.executable, "-c", _INTERRUPTED]), env=daemon.env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        with reaped(proc):  # killed if need be, its pipes closed on every path
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"

            def asleep() -> bool:  # the main thread blocked in its read
                with open(f"/proc/{proc.pid}/task/{proc.pid}/stat") as f:
                    return f.read().rsplit(")", 1)[1].split()[0] == "S"

            deadline = time.monotonic() + 60
            while not (asleep() and (time.sleep(0.2) or asleep())):
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the child never blocked in its read"
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (out, err)
    assert out.startswith("interrupted after"), out
