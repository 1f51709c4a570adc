"""Time, injected.

The core never calls :mod:`time` itself. The daemon passes a :class:`SystemClock`;
tests pass a :class:`ManualClock` and move it by hand.

``monotonic()`` drives every expiry decision. On Linux it is ``CLOCK_MONOTONIC``,
which stops while the machine is suspended, so a laptop that sleeps for an hour
expires nobody. ``now()`` is wall time, used only for what people read
(``last_heartbeat`` as RFC 3339, "since 14:02").
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """What the core needs to know about time."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back and stops during suspend."""
        ...

    def now(self) -> float:
        """Wall-clock seconds since the epoch, for display and persistence."""
        ...


class SystemClock:
    """The real clocks."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when a test says so."""

    def __init__(self, monotonic: float = 1000.0, now: float = 1_796_000_000.0) -> None:
        self._mono = monotonic
        self._wall = now

    def monotonic(self) -> float:
        return self._mono

    def now(self) -> float:
        return self._wall

    def advance(self, seconds: float) -> None:
        """Move both clocks forward, as time passing would."""
        if seconds < 0:
            raise ValueError("time does not go back")
        self._mono += seconds
        self._wall += seconds

    def suspend(self, seconds: float) -> None:
        """Move wall time only, as a laptop suspend does to CLOCK_MONOTONIC."""
        self._wall += seconds
