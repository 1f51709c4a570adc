"""Bursts take turns (meshd.server.turns.Turns): a few pipelined frames per pass of the loop.

The event loop is deterministic without I/O: each ``asyncio.sleep(0)`` is one pass,
so these count frames per pass, not time.
"""

from __future__ import annotations

import asyncio

import pytest

from meshd.server.turns import Turns


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _burst(turns: Turns, name: int, frames: int, log: list[int]) -> None:
    for _ in range(frames):
        await turns.wait()
        log.append(name)


async def test_a_lone_request_waits_for_a_few_frames_not_for_every_burst() -> None:
    """100 connections pipelining: a request that came alone (a ping, resumed in the
    next pass) has only a few of their frames run before it, not one per burst (with a
    plain yield per frame, as before, all 100 ran)."""
    turns, log = Turns(per_turn=2), []
    tasks = [asyncio.create_task(_burst(turns, i, 5, log)) for i in range(100)]
    for _ in range(3):
        await asyncio.sleep(0)  # the bursts are under way
    before = len(log)
    await asyncio.sleep(0)  # the lone request's pass
    ran = len(log) - before
    await asyncio.gather(*tasks)

    assert ran <= 2 * turns.per_turn
    assert sorted(log) == sorted(list(range(100)) * 5)  # every frame of every burst ran


async def test_bursts_advance_in_turn() -> None:
    """One frame per pass: the bursts go round robin, none runs ahead of the others."""
    turns, log = Turns(per_turn=1), []
    await asyncio.gather(*(_burst(turns, i, 3, log) for i in range(3)))

    assert log == [0, 1, 2] * 3


async def test_a_lone_burst_goes_on_at_a_frame_per_pass() -> None:
    turns, log = Turns(per_turn=2), []
    task = asyncio.create_task(_burst(turns, 0, 4, log))
    seen = []
    for _ in range(6):
        await asyncio.sleep(0)
        seen.append(len(log))
    await task

    assert seen == [0, 1, 2, 3, 4, 4]


async def test_a_cancelled_waiter_takes_no_turn() -> None:
    """A connection that closes while it waits for its turn gives it to the next."""
    turns, log = Turns(per_turn=1), []
    first = asyncio.create_task(_burst(turns, 0, 1, log))
    gone = asyncio.create_task(_burst(turns, 1, 1, log))
    last = asyncio.create_task(_burst(turns, 2, 1, log))
    await asyncio.sleep(0)  # all three asked: 0 goes, 1 and 2 wait
    gone.cancel()
    await asyncio.gather(first, last)

    assert log == [0, 2]
    assert not turns.waiting


async def test_a_request_that_arrives_goes_before_the_next_turns_frames() -> None:
    """A lone request read from a socket (the loop's I/O callback wakes its reader, as
    :class:`meshd.server.frames.FrameReader` does) resumes before the burst frames of the
    turn let go in the same pass: the turn is taken after that pass's reads."""
    import socket

    turns, log = Turns(per_turn=2), []
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    a.setblocking(False)
    arrived = loop.create_future()

    def readable() -> None:
        a.recv(1)
        loop.remove_reader(a.fileno())
        arrived.set_result(len(log))

    tasks = [asyncio.create_task(_burst(turns, i, 50, log)) for i in range(20)]
    try:
        for _ in range(3):
            await asyncio.sleep(0)  # the bursts are under way
        loop.add_reader(a.fileno(), readable)
        b.send(b"x")
        read_at = await arrived  # burst frames done when its bytes were read
        resumed_at = len(log)  # ... and when the request's task runs
    finally:
        for t in tasks:
            t.cancel()
        a.close()
        b.close()

    assert resumed_at - read_at == 0
