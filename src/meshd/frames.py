"""Cutting a connection's bytes into frames, with the memory of unfinished ones bounded.

A frame is one line of JSON; the limit is exact and lives in one place,
:func:`meshd.protocol.framing.frame_too_large` (the clients check the same before
sending): a frame of ``MAX_FRAME`` bytes, the newline not counted, is read; one byte
more is refused, whether or not its newline has arrived yet.

Partial frames cost memory until their newline comes. Each connection may hold up to
:data:`FREE_PARTIAL` bytes of them on its own (a receive's worth: every ordinary
request fits); beyond that it draws on one budget shared by all connections
(:class:`PartialBudget`). A connection that would overdraw it is refused
(:class:`OverBudget`): 1,500 clients each sending 1 MiB without a newline cannot
make the daemon hold 1.5 GB.
"""

from __future__ import annotations

from anyio.abc import ByteReceiveStream

from meshd.protocol.framing import DELIMITER, frame_too_large

RECEIVE_SIZE = 65536
"""Bytes asked of the socket per receive."""
FREE_PARTIAL = 65536
"""Unfinished-frame bytes a connection may hold without drawing on the shared budget."""
PARTIAL_BUDGET = 64 * 1024 * 1024
"""Unfinished-frame bytes beyond :data:`FREE_PARTIAL`, summed over every connection."""


class FrameTooLong(Exception):
    """The frame being read is over the limit; the rest of it cannot be framed."""


class OverBudget(Exception):
    """Taking more of this connection's unfinished frame would overdraw the shared budget."""


class PartialBudget:
    """Bytes of unfinished frames held beyond each connection's free allowance."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int = PARTIAL_BUDGET) -> None:
        self.limit = limit
        self.used = 0


class FrameReader:
    """One connection's frames: ``await reader.frame()`` returns the next line, newline cut.

    Raises ``anyio.EndOfStream`` when the peer closes (an unfinished frame is dropped),
    :class:`FrameTooLong` and :class:`OverBudget` as above. Call :meth:`release` when
    the connection ends, to give back what it held of the budget.
    """

    __slots__ = ("_budget", "_buf", "_held", "_stream")

    def __init__(self, stream: ByteReceiveStream, budget: PartialBudget) -> None:
        self._stream = stream
        self._budget = budget
        self._buf = bytearray()
        self._held = 0

    async def frame(self) -> bytes:
        buf = self._buf
        if not buf:
            data = await self._stream.receive(RECEIVE_SIZE)
            end = data.find(DELIMITER)
            if end == len(data) - 1 and not frame_too_large(end):
                return data[:end]  # the common case: exactly one whole frame, no copy
            buf += data
            self._account()
        scanned = 0
        while True:
            end = buf.find(DELIMITER, scanned)
            if end >= 0:
                if frame_too_large(end):
                    raise FrameTooLong
                line = bytes(buf[:end])
                if end > FREE_PARTIAL:  # a big frame: let its allocation go, keep the rest
                    self._buf = bytearray(buf[end + 1 :])
                else:
                    del buf[: end + 1]
                self._account()
                return line
            if frame_too_large(len(buf)):
                raise FrameTooLong
            scanned = len(buf)
            buf += await self._stream.receive(RECEIVE_SIZE)
            self._account()

    def _account(self) -> None:
        held = max(0, len(self._buf) - FREE_PARTIAL)
        budget = self._budget
        grow = held - self._held
        if grow > 0 and budget.used + grow > budget.limit:
            raise OverBudget
        budget.used += grow
        self._held = held

    def release(self) -> None:
        """Give back this connection's share of the budget, and its buffer."""
        self._budget.used -= self._held
        self._held = 0
        self._buf = bytearray()
