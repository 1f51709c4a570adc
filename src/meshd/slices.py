"""A request's work on the event loop, cut into slices.

A handler that walks many items (1,000 paths of a ``board.changed``, 256 keys of a
``claim.check``) on the loop holds every other client for as long as it takes: a
ping waited 1.2 s behind one ``board.changed`` of 1,000 deep paths. Such a handler
calls :meth:`Slices.tick` once per item; after :data:`SLICE` seconds of work it
yields one turn of the loop, so other requests (and the sweeper, and the socket
guard) run between its slices. Paths are resolved off the loop besides
(:meth:`meshd.service.Service.resolve_paths`); this bounds what is left.

A handler that yields must expect the world to have moved on meanwhile: a session
may have ended, a claim changed hands. The callers read state only (``claim.check``)
or re-check what they rely on after a yield (``board.changed``).
"""

from __future__ import annotations

import time

import anyio.lowlevel

SLICE = 0.005
"""Seconds of work on the loop before a handler lets others run (the loop's ping
stays well under the 50 ms the daemon aims at, whatever one request asks)."""


class Slices:
    """One request's clock: :meth:`tick` yields once a slice is used up."""

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since = time.perf_counter()

    async def tick(self) -> bool:
        """Yield to the loop if this slice is used up; whether it did."""
        now = time.perf_counter()
        if now - self._since < SLICE:
            return False
        await anyio.lowlevel.checkpoint()
        self._since = time.perf_counter()
        return True
