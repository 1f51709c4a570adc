"""Signals (SPEC §7): named, durable, numbered events that pass the baton. Pure.

``emit(NAME, payload)`` gives the name its next sequence number (1, 2, 3 … per
name, never reused, across restarts and pruning) and keeps it as the name's
newest signal. A wait asks for "the newest signal of NAME newer than SEQ" (or
"emitted within the last D seconds"): when the newest one qualifies it is the
answer at once, so a late waiter still sees an earlier emit; otherwise the
waiter waits for the next emit (the daemon parks it; this module only says
whether a signal matches, :func:`matches`).

Only the newest signal of each name is held in memory: it is the only one a
wait can return. Every emit is stored (``("signal.put", sig)``) for the
history; rows older than ``history_days`` are pruned (``("signal.prune",
cutoff)``) while each name's counter is kept (a pruned name goes on from its
last number, so ``--after`` never waits on a number already used).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from meshd.core.clock import Clock, SteadyWall

Write = tuple[Any, ...]


class Signal(msgspec.Struct, frozen=True):
    """One emit. ``payload`` is the JSON text the emitter sent (``null`` when none)."""

    name: str
    seq: int
    payload: str
    emitted_by: str | None
    emitted_at: float


def matches(sig: Signal | None, after: int | None, since_at: float | None) -> bool:
    """Whether ``sig`` answers a wait for one newer than ``after`` / at or after ``since_at``."""
    if sig is None:
        return False
    if after is not None and sig.seq <= after:
        return False
    return since_at is None or sig.emitted_at >= since_at


class SignalBoard:
    """The newest signal and the counter of every name of one profile."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.steady = SteadyWall(clock)  # ages for pruning: wall-clock steps do not count
        self.newest: dict[str, Signal] = {}
        self.counters: dict[str, int] = {}
        self.writes: list[Write] = []

    def restore(self, newest: Iterable[Signal], counters: dict[str, int]) -> None:
        for sig in newest:
            self.newest[sig.name] = sig
        for name, seq in counters.items():
            self.counters[name] = max(seq, self.counters.get(name, 0))

    def emit(self, name: str, payload: str, by: str | None) -> Signal:
        """Number and keep a new signal of ``name``."""
        seq = self.counters.get(name, 0) + 1
        self.counters[name] = seq
        sig = Signal(name, seq, payload, by, self.clock.now())
        self.newest[name] = sig
        self.writes.append(("signal.put", sig))
        return sig

    def put_back(self, name: str, newest: Signal | None, counter: int | None) -> None:
        """Undo an emit the disk refused: the name's newest signal and counter as before."""
        if newest is None:
            self.newest.pop(name, None)
        else:
            self.newest[name] = newest
        if counter is None:
            self.counters.pop(name, None)
        else:
            self.counters[name] = counter

    def find(self, name: str, after: int | None, since: float | None) -> Signal | None:
        """The newest signal of ``name`` if it is newer than ``after`` and emitted within
        the last ``since`` seconds (each when given); None means: wait for the next."""
        sig = self.newest.get(name)
        return sig if matches(sig, after, self.since_at(since)) else None

    def since_at(self, since: float | None) -> float | None:
        """The wall time a ``since`` of that many seconds reaches back to."""
        return None if since is None else self.clock.now() - since

    def last_seq(self, name: str) -> int:
        return self.counters.get(name, 0)

    def prune(self, history_days: float) -> None:
        """Forget signals older than ``history_days`` (the counters stay)."""
        cutoff = self.steady.now() - history_days * 86400
        for name, sig in list(self.newest.items()):
            if sig.emitted_at < cutoff:
                del self.newest[name]
        self.writes.append(("signal.prune", cutoff))

    def drain(self) -> list[Write]:
        writes, self.writes = self.writes, []
        return writes
