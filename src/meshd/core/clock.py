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

    def step(self, seconds: float) -> None:
        """Step wall time by ``seconds``, either way (an NTP or manual clock step)."""
        self._wall += seconds


class SteadyWall:
    """Wall time that, within one run, moves only as the monotonic clock does.

    For *ages* that decide what is deleted (history_days): a wall-clock step of +40
    days must not make every read message 40 days old. ``now()`` is the wall time
    at creation plus monotonic time since, never later than the real wall clock
    (a step back ages things more slowly, which only keeps them longer). Across a
    restart it starts again from the wall clock, which is all it can know.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._wall0 = clock.now()
        self._mono0 = clock.monotonic()

    def now(self) -> float:
        return min(self.clock.now(), self._wall0 + self.clock.monotonic() - self._mono0)
