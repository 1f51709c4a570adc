"""A hung daemon (SIGSTOP) against the blocking client (issue 10 item 12): failing open
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
