"""The frame reader on a real socket pair: pipelined requests never draw on the budget
for unfinished frames, however far the client runs ahead of the daemon."""

from __future__ import annotations

import socket

import anyio

from meshd.server.frames import FREE_PARTIAL, FrameReader, PartialBudget


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


class _CountingSocket(socket.socket):
    """A real socket that counts its receives."""

    recvs = 0

    def recv(self, size: int, flags: int = 0) -> bytes:
        self.recvs += 1
        return super().recv(size, flags)


async def test_a_client_that_waits_for_each_reply_costs_about_one_receive_a_frame() -> None:
    """A client that sends its next request only after the reply (nearly every one)
    never has it in when the reader looks: the reader's own early receive fails, and
    it tries it less and less often, waiting for the loop's callback, which reads each
    frame with one receive. It used to try first every time: two receives a frame,
    one of them failing."""
    a, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours = _CountingSocket(fileno=a.detach())
    ours.setblocking(False)
    reader = FrameReader(ours, PartialBudget())
    try:
        got: list[bytes] = []

        async def read() -> None:
            got.append(await reader.frame())

        for i in range(40):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                for _ in range(3):  # the reader is waiting for its callback
                    await anyio.lowlevel.checkpoint()
                theirs.sendall(b'{"id":%d}\n' % i)
            assert got[-1] == b'{"id":%d}' % i
    finally:
        reader.release()
        ours.close()
        theirs.close()

    assert ours.recvs <= 40 + 40 // 5  # one per frame, and a few early tries that failed


async def test_a_pipelining_client_is_read_without_waiting_for_the_callback() -> None:
    """Bytes the callback finds while the frame loop is busy mean the client runs
    ahead: the reader tries its own receive again before waiting, and every frame
    still arrives, in order."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setblocking(False)
    reader = FrameReader(ours, PartialBudget())
    got: list[bytes] = []

    async def serve() -> None:
        while len(got) < 20:
            got.append(await reader.frame())
            await anyio.lowlevel.checkpoint()  # busy: the callback reads meanwhile

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            for i in range(20):
                theirs.sendall(b'{"id":%d}\n' % i)
                await anyio.lowlevel.checkpoint()
    finally:
        reader.release()
        ours.close()
        theirs.close()

    assert got == [b'{"id":%d}' % i for i in range(20)]
