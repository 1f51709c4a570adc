"""The frame reader on a real socket pair: pipelined requests never draw on the budget
for unfinished frames, however far the client runs ahead of the daemon."""

from __future__ import annotations

import socket

import anyio

from meshd.frames import FREE_PARTIAL, FrameReader, PartialBudget


async def test_pipelined_frames_never_draw_on_the_partial_budget() -> None:
    """A client pipelining 6,000 whole requests (~270 KB) while the daemon is busy
    between them: the reader stops at its free allowance and never takes from the
    shared budget (here none at all), so it is never refused for "partial frames"."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setblocking(False)
    frames = [b'{"jsonrpc":"2.0","id":%d,"method":"mesh.ping"}' % i for i in range(6000)]
    data = b"\n".join(frames) + b"\n"
    assert len(data) > 4 * FREE_PARTIAL
    budget = PartialBudget(limit=0)
    reader = FrameReader(ours, budget)
    got: list[bytes] = []

    async def serve() -> None:
        while len(got) < len(frames):
            got.append(await reader.frame())
            for _ in range(3):  # busy with the request: the loop reads meanwhile
                await anyio.lowlevel.checkpoint()

    async def send() -> None:
        view = memoryview(data)
        while view:
            await anyio.wait_writable(theirs)
            try:
                view = view[theirs.send(view) :]
            except BlockingIOError:
                continue

    theirs.setblocking(False)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            for _ in range(3):  # serve() waits for its first frame, the socket watched
                await anyio.lowlevel.checkpoint()
            await send()
    finally:
        reader.release()
        ours.close()
        theirs.close()

    assert got == frames
    assert budget.used == 0
