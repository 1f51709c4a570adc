"""Pipelined bursts take turns over all connections, a few frames per pass of the loop.

A client that pipelines (its next frame is already read) or sends a batch could
otherwise start thousands of requests in one pass of the event loop while everyone
else's single request waits behind them. :class:`Turns` lets at most
:data:`BURST_FRAMES_PER_TURN` such frames go per pass, over all connections; the
server's frame loop (:mod:`meshd.server.serve`) calls :meth:`Turns.wait` before each.
"""

from __future__ import annotations

import asyncio
from collections import deque

BURST_FRAMES_PER_TURN = 1
"""Frames of pipelined bursts (a connection with more frames already read) started per
pass of the event loop, over all connections together. A request that arrives alone
(a ping) waits for at most this many burst frames, not one per bursting connection:
with 100 connections pipelining 100 queued acquires each, a pass used to start 100 of
them (~14 ms of CPU) before anyone else's request. A ping waits for the rest of the
pass it arrives in and for the bursts of the next one (see :class:`Turns`), so this
is about 1.5 burst frames for it on average: 2 a pass made the waiter storm's ping
p50 0.36-0.38 ms while 10,000 waits queued, 1 makes it 0.22 ms (0.48 -> 0.19 ms while
they are withdrawn); the storm's daemon CPU moved within its noise (enqueue 1.00 ->
0.97 s, cancel 0.17 -> 0.19 s: docs/bench-runs/2026-12-01-notebook.md, sixth pass)."""


class Turns:
    """Pipelined bursts take turns: :data:`BURST_FRAMES_PER_TURN` frames per loop pass.

    A connection that has its next frame read already (the client pipelines) calls
    :meth:`wait` before starting it. At most ``per_turn`` such frames are let go per
    pass of the event loop, over all connections, in arrival order; so every burst
    advances, and a request that came alone is started in the next pass whatever the
    number of bursting connections. A lone burst goes on at one frame per pass, as
    with a plain yield.

    The turn is taken by a zero-delay timer, not ``call_soon``: asyncio runs a pass's
    due timers after the callbacks of the socket reads that pass found, so a request
    that just arrived (its reader woken by that read) resumes in the next pass ahead
    of the burst frames this turn lets go. With ``call_soon`` the turn ran first and
    every ping waited for two more burst frames (waiter storm: ping p50 while 10,000
    waits queue 0.55-0.66 -> 0.35-0.56 ms). On uvloop (``MESH_EVENT_LOOP=uvloop``) a
    timer already due *is* ``call_soon`` (uvloop's ``call_later`` runs a delay that
    rounds to 0 ms so), and uvloop runs ready callbacks before it polls: there a ping
    still waits for the turn's burst frames, as with ``call_soon`` -- no gain, no change.
    """

    __slots__ = ("_armed", "_loop", "per_turn", "used", "waiting")

    def __init__(self, per_turn: int = BURST_FRAMES_PER_TURN) -> None:
        self.per_turn = per_turn
        self.used = 0
        """Frames let go in this pass (reset by :meth:`_tick`)."""
        self.waiting: deque[asyncio.Future[None]] = deque()
        self._armed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    async def wait(self) -> None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        if not self._armed:
            self._armed = True
            loop.call_at(0.0, self._tick)
        if self.used < self.per_turn and not self.waiting:
            self.used += 1
            await asyncio.sleep(0)  # a turn is free: go on in the next pass
            return
        fut = loop.create_future()
        self.waiting.append(fut)
        await fut

    def _tick(self) -> None:
        """A new pass: let the next waiting bursts go (once per pass while any waits)."""
        self.used, waiting = 0, self.waiting
        while self.used < self.per_turn and waiting:
            fut = waiting.popleft()
            if not fut.done():  # a cancelled one (its connection closed) takes no turn
                fut.set_result(None)
                self.used += 1
        if self.used or waiting:
            assert self._loop is not None
            self._loop.call_at(0.0, self._tick)
        else:
            self._armed = False
