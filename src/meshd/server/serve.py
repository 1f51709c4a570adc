"""The socket server: the per-connection frame loop, and where each request runs.

Connection protocol (SPEC §3):

* Every accepted connection is checked first: the peer's uid (``SO_PEERCRED`` /
  ``LOCAL_PEERCRED``) must be ours, else one ``FORBIDDEN`` error line and close
  (the accept loop and that check: :mod:`meshd.server.admission`).
* Then the client sends JSON-RPC 2.0 frames, one compact JSON value per line.
  Blank lines are ignored. A line that is not JSON gets ``-32700`` and the
  connection stays open (the framing is intact); so does a line nested too deeply
  to decode (``-32600``). A line over 1 MiB gets
  ``-32600`` and the connection is closed, because the rest of that line cannot
  be framed.
* Requests on one connection are answered in order, except methods marked
  ``concurrent`` (waits, asks), which answer when they are done; clients match
  replies by id. Every request runs in the connection's reading task, in the order
  it came, up to the point where it has to wait; there its handler returns a record
  (:class:`~meshd.protocol.jsonrpc.Later`, the one way to wait) and the reading goes
  on at once. The record is answered when settled and withdrawn if the connection
  closes first (:class:`~meshd.server.replies.Answer`): settled by a callback (a queued
  ``claim.acquire``: no task at all), or by the task ``Later.running`` started for
  work that waits (an ask to another host, a signal wait), which the withdrawal
  cancels. A request that never waits costs no task. At most
  :data:`~meshd.server.connection.MAX_INFLIGHT` concurrent requests run at once per
  connection; past that the connection is not read until one finishes. A batch is
  answered as one array once its last element is done (:class:`~meshd.server.replies.Batch`);
  an element that waits returns its record the same way, so it holds up neither the
  elements after it nor the connection's next frames. Pipelined frames (a burst: the next
  frame already read) and a batch's elements take turns over all connections,
  :data:`~meshd.server.turns.BURST_FRAMES_PER_TURN` per pass of the event loop
  (:mod:`meshd.server.turns`): one client's 10,000 queued acquires, or 100 clients'
  bursts, do not hold up anyone's ping by more than a few frames; a closing
  connection's waits are withdrawn a few a turn the same way.
* Events for sessions the connection subscribed to arrive as notifications
  (``{"jsonrpc":"2.0","method":"event","params":…}``). Replies and events share
  one write path, the connection's (:mod:`meshd.server.connection`: straight to the
  socket, a bounded backlog, a reader that falls behind is dropped).

Resource handling: each connection runs in its own task group (its reading
task, the requests that wait, the writer of its backlog) and is closed in
``finally``. Error handling: any exception inside a connection is logged and ends
that connection only.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

import anyio
from anyio.abc import ByteStream, SocketAttribute, SocketListener

from meshd.protocol.errors import INVALID_REQUEST, MeshUnavailable
from meshd.protocol.framing import DELIMITER, MAX_FRAME
from meshd.protocol.jsonrpc import (
    Call,
    Dispatcher,
    Later,
    encoder,
    error_object,
    error_response,
    run,
    start,
)
from meshd.protocol.trust import peer_credentials
from meshd.server.admission import Admission, accept_loop
from meshd.server.connection import MAX_INFLIGHT, Connection, readable
from meshd.server.frames import FrameReader, FrameTooLong, OverBudget, PartialBudget
from meshd.server.replies import Answer, Batch
from meshd.server.turns import Turns
from meshd.service import Conn, Service

log = logging.getLogger("meshd.server")

_TOO_LARGE = encoder.encode(
    error_response(
        None,
        error_object(
            INVALID_REQUEST,
            f"Invalid request: frame over {MAX_FRAME} bytes; closing the connection",
            {"code": "FRAME_TOO_LARGE", "limit": MAX_FRAME},
        ),
    )
)

_OVER_BUDGET = encoder.encode(
    error_response(
        None,
        MeshUnavailable(
            "the daemon holds too many unfinished requests of other connections; "
            "closing this one: retry",
            {"reason": "partial_frames"},
        ).to_wire(),
    )
)
IDLE_CHECK_INTERVAL = 1.0
"""How often connections are looked at for the idle timeout."""

_DISCONNECTS = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)
"""The client went away: the end of a connection, not a failure."""


WITHDRAW_PER_TURN = 4
"""Waits a closing connection withdraws per turn (:meth:`Server._reader`): about the
cost of the burst frame a turn lets go (a withdrawal is ~15-20 µs, a queued acquire
~70 µs with its reading and reply)."""


class Server:
    """Serves one or more listeners with the same :class:`Service`."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.rpc = Dispatcher(service.lookup)
        self.connections: dict[int, Connection] = {}
        self._ids = itertools.count(1)
        self.admission = Admission(service)
        service.limits = self.admission.limit
        self.partial = PartialBudget()
        self.turns = Turns()
        self._next_idle_check = 0.0

    def stats(self) -> dict[str, int]:
        return {"connections": len(self.connections)}

    async def serve(
        self,
        listener: SocketListener,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept until cancelled or the listener is closed (:func:`accept_loop`)."""
        self.admission.measure()
        await accept_loop(listener, self._handle, task_status=task_status)

    async def _handle(self, stream: ByteStream) -> None:
        conn = Conn(next(self._ids))
        c: Connection | None = None
        counted: int | None = None
        try:
            sock = stream.extra(SocketAttribute.raw_socket)
            conn.peer_pid, uid = peer_credentials(sock)
            counted = uid
            if (refusal := self.admission.enter(uid)) is not None:
                await stream.send(
                    encoder.encode(error_response(None, refusal.to_wire())) + DELIMITER
                )
                return
            async with anyio.create_task_group() as tg:
                c = Connection(stream, conn, tg)
                c.sock = sock
                c.answer = Answer(c)
                conn.push = c.push
                self.connections[conn.id] = c
                self.service.connection_opened(conn)
                c.reader = FrameReader(sock, self.partial)
                await self._reader(c)
                if not c.closed:  # a request it ran waited; another reader closes it
                    await anyio.sleep_forever()
        except _DISCONNECTS as exc:
            log.debug("connection %d: %s", conn.id, exc)
        except ExceptionGroup as group:  # from the connection's task group
            _gone, rest = group.split(_DISCONNECTS)
            if rest is not None:
                log.error("connection %d failed", conn.id, exc_info=rest)
            else:
                log.debug("connection %d: %s", conn.id, group)
        except Exception:
            log.exception("connection %d failed", conn.id)
        finally:
            if counted is not None:
                self.admission.leave(counted)
            if c is not None:
                c.closed = True
                if c.reader is not None:
                    c.reader.release()
                    c.reader = None
                c.withdraw()  # its waiting records withdraw, as its waiting tasks did
                self.connections.pop(conn.id, None)
                self.service.connection_closed(conn)
            with anyio.CancelScope(shield=True):
                await stream.aclose()

    def close_idle(self) -> None:
        """Close connections idle for ``idle_timeout`` that hold no session and no
        subscription and are owed nothing (the daemon's sweeper calls this every tick).

        Such a connection costs a descriptor and memory for nothing; its client, if it
        is still there, reconnects on its next call.
        """
        now = time.monotonic()
        if now < self._next_idle_check:
            return
        self._next_idle_check = now + IDLE_CHECK_INTERVAL
        cutoff = now - self.service.state.settings.idle_timeout
        for c in list(self.connections.values()):
            if (
                c.last_frame < cutoff
                and not c.busy()
                and not self.service.holds(c.conn)
                and not readable(c.sock)  # a request just arrived: not idle
                and not (c.reader is not None and c.reader.buffered())
            ):
                log.debug("connection %d idle; closed", c.conn.id)
                c.close()

    async def _reader(self, c: Connection) -> None:
        """Read and serve the connection's frames until it ends, then close it.

        Every request runs right here, in turn, ``concurrent`` ones too: most of them
        (a granted claim, an ask answered at once) never wait, and cost no task. One
        that has to wait returns a :class:`Later` for the part that waits, answered
        when settled, and the reading goes on at once.
        """
        reader = c.reader
        assert reader is not None
        waited = False
        while not c.closed:
            try:
                line = await reader.frame()
            except FrameTooLong:
                await c.send(_TOO_LARGE)
                break
            except OverBudget:
                log.warning(
                    "connection %d refused: %d bytes of unfinished requests held",
                    c.conn.id, self.partial.used,
                )  # fmt: skip
                await c.send(_OVER_BUDGET)
                break
            except (anyio.IncompleteRead, anyio.EndOfStream):
                break
            c.last_frame = time.monotonic()
            if not waited and reader.buffered():
                # The first frame of a burst takes a turn too: 100 clients connecting
                # with 100 pipelined frames each started their first one in the same
                # pass, ahead of everyone's single request. A frame that came alone
                # (nothing read behind it) never waits.
                await self.turns.wait()
            await self._frame(c, line)
            waited = reader.buffered()
            if waited:
                # A burst of frames from one client: it takes turns with the other
                # bursts, a few frames per pass of the loop (Turns), so nobody's
                # burst (a storm of 10,000 queued acquires) delays anyone else's
                # one request by more than a few frames.
                await self.turns.wait()
        if c.inflight.value < MAX_INFLIGHT and not c.closed:
            await self._withdraw(c)
        c.close()

    async def _withdraw(self, c: Connection) -> None:
        """The peer left with requests of it still waiting (up to 128): withdraw them,
        :data:`WITHDRAW_PER_TURN` a turn, so 100 clients hanging up at once do not stall
        the loop for all their waits in one pass (pings waited 25-80 ms while 100 closes
        withdrew 10,000 waits at once). The connection is flagged ``leaving`` at once,
        and the claim table asks that flag before it grants a wait
        (``WaitQueue.departed``): meanwhile none is granted, neither by a release nor by
        the withdrawal of an earlier wait of the same connection (SPEC §5: a waiter is
        cancelled when its connection closes; a session held keys its departed client
        never heard of). What is left when the connection closes is withdrawn by its
        ``finally`` (:meth:`_handle`). One flag, not a mark on each wait: 100 connections
        closing at once marked their 10,000 waits in the pass that read the hang-ups
        (~9 ms of stall)."""
        c.conn.leaving = True
        later = c.later
        await self.turns.wait()
        while later and not c.closed:
            c.withdraw(WITHDRAW_PER_TURN)
            if later:
                await self.turns.wait()

    async def _frame(self, c: Connection, line: bytes) -> None:
        """Serve one frame (see :meth:`_reader`)."""
        body = line.strip()
        if not body:
            return
        if body[0] == 0x5B:  # "[": a batch
            items = self.rpc.batch(body)
            if isinstance(items, bytes):
                c.write(items + DELIMITER, 0)
                return
            await self._batch(c, Batch(items))
            return
        call = self.rpc.prepare(body)
        if not isinstance(call, Call):
            if call is not None:
                c.write(call + DELIMITER, 0)
            return
        if not call.handler.concurrent:
            reply = await run(call, c.conn)
            if reply is not None:
                c.write(reply + DELIMITER, 0)
            return
        out = await self._run(c, call)
        if isinstance(out, Later):
            self._later(c, call, out, None, 0)
        elif out is not None:
            c.write(out + DELIMITER, 0)

    async def _run(self, c: Connection, call: Call) -> bytes | Later | None:
        """Run a ``concurrent`` call here, holding one of the connection's slots (a
        :class:`Later` it returns keeps the slot until it is answered: :meth:`_later`)."""
        if not await c.slot():
            c.close()  # the client hung up while we were not reading it
            return None
        out: bytes | Later | None = None
        try:
            out = await start(call, c.conn)
            return out
        except asyncio.CancelledError:
            if not c.closed:
                raise
            # The connection closed under a waiting call (the wait withdrew itself on
            # the way out): end without raising. Raised on, each such call left a
            # reference cycle (anyio's task_done keeps the error, whose traceback holds
            # ~9 frames): 10,000 waits dropped at once were ~190,000 objects that only
            # the collector frees, in one young collection of 0.3-1 s.
            return None
        finally:
            if not isinstance(out, Later):
                c.inflight.release()

    def _later(self, c: Connection, call: Call, later: Later, b: Batch | None, i: int) -> None:
        """Answer ``later`` once settled (``b``: as element ``i`` of that batch), like a
        request that waited in a task, and free its slot; until then, closing the
        connection withdraws it (:meth:`_handle`)."""
        c.later.add(later)
        later.method, later.rid, later.notify = call.method, call.rid, call.notify
        later.bind(c.answer if b is None else Answer(c, b, i))

    async def _batch(self, c: Connection, b: Batch) -> None:
        """Start a batch's elements in order, from ``b.next``.

        A batch is answered as one array, once its last element is done (SPEC §3:
        batches are not atomic). An element that waits does not hold up the ones
        after it, nor the connection's next frames: like a request of its own, it
        returns a :class:`Later`, answered into its place when settled. The elements take turns with
        other bursts (:class:`Turns`) like pipelined frames.
        """
        items = b.items
        while b.next < len(items):
            i = b.next
            if i:
                await self.turns.wait()
            b.next = i + 1
            call = self.rpc.prepare(items[i])
            if not isinstance(call, Call):
                b.replies[i] = call
                continue
            b.open += 1
            if call.handler.concurrent:
                out = await self._run(c, call)
                if isinstance(out, Later):
                    self._later(c, call, out, b, i)  # b.open stays counted until answered
                    continue
                b.replies[i] = out
            else:
                b.replies[i] = await run(call, c.conn)
            b.open -= 1
        b.done(c)
