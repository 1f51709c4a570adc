"""The fail-open rule both clients drive (``meshctl._core.session.FailOpen``), on a
manual clock: no daemon, no sleeping."""

from __future__ import annotations

import logging

import pytest

from meshctl._core.session import BACKOFF_MAX, FailOpen
from meshd.protocol.errors import MeshTimeout, MeshUnavailable


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class TestFailOpen:
    def test_without_fail_open_the_failure_is_raised(self) -> None:
        """A client that does not fail open raises the failure itself and stays whole."""
        policy = FailOpen(False, Clock())
        exc = MeshUnavailable("no daemon")

        with pytest.raises(MeshUnavailable) as raised:
            policy.failed(exc)

        assert raised.value is exc
        assert (policy.degraded, policy.skip(), policy.may_start(True)) == (False, False, True)

    def test_calls_are_no_ops_until_the_backoff_runs_out(self) -> None:
        """Failing open: degraded, calls skipped for 0.5 s, then tried once; each failure
        doubles the wait up to 30 s; no daemon is started meanwhile."""
        clock = Clock()
        policy = FailOpen(True, clock)

        policy.failed(MeshTimeout("hung"))
        skipped = [policy.skip()]
        clock.now += 0.5
        skipped.append(policy.skip())
        waits = []
        for _ in range(8):
            policy.failed(MeshUnavailable("still gone"))
            start = clock.now
            while policy.skip():
                clock.now += 0.25
            waits.append(clock.now - start)

        assert skipped == [True, False]
        assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, BACKOFF_MAX, BACKOFF_MAX, BACKOFF_MAX]
        assert policy.degraded
        assert policy.may_start(True) is False

    def test_each_change_is_said_once(self, caplog: pytest.LogCaptureFixture) -> None:
        """Going away and coming back are each logged once, however many calls see them;
        after coming back the backoff starts again from 0.5 s."""
        clock = Clock()
        policy = FailOpen(True, clock)

        with caplog.at_level(logging.WARNING, "meshctl"):
            for _ in range(3):
                policy.failed(MeshUnavailable("gone"))
                clock.now += BACKOFF_MAX
            policy.answered("p")
            policy.answered("p")
            policy.failed(MeshUnavailable("gone again"))

        said = [r.getMessage() for r in caplog.records]
        assert said == [
            "Session Mesh is unreachable, continuing without it (fail_open): gone",
            "Session Mesh is reachable again (profile p)",
            "Session Mesh is unreachable, continuing without it (fail_open): gone again",
        ]
        assert policy.skip()
        clock.now += 0.5
        assert not policy.skip()
