"""The socket server: accept loop, per-connection frame loop, event push.

Connection protocol (SPEC §3):

* Every accepted connection is checked first: the peer's uid (``SO_PEERCRED`` /
  ``LOCAL_PEERCRED``) must be ours, else one ``FORBIDDEN`` error line and close.
* Then the client sends JSON-RPC 2.0 frames, one compact JSON value per line.
  Blank lines are ignored. A line that is not JSON gets ``-32700`` and the
  connection stays open (the framing is intact); so does a line nested too deeply
  to decode (``-32600``). A line over 1 MiB gets
  ``-32600`` and the connection is closed, because the rest of that line cannot
  be framed.
* Requests on one connection are answered in order, except methods marked
  ``concurrent`` (waits, asks), which answer when they are done; clients match
  replies by id. Every request runs in the connection's reading task; one that
  has to wait detaches (``conn.detach()``) and keeps that task, while a new one
  reads on, so a request that never waits costs no task. A request that waits for
  a callback (a queued ``claim.acquire``) costs none either: its handler returns a
  record (:class:`~meshd.protocol.jsonrpc.Later`) that is answered when settled and
  withdrawn if the connection closes first. At most
  :data:`MAX_INFLIGHT` concurrent requests run at once per connection; past that
  the connection is not read until one finishes. A batch is answered as one
  array once its last element is done; an element that waits detaches the same
  way, so it holds up neither the elements after it nor the connection's next
  frames. Pipelined frames (a burst: the next frame already read) and a batch's
  elements take turns over all connections, :data:`BURST_FRAMES_PER_TURN` per
  pass of the event loop: one client's 10,000 queued acquires, or 100 clients'
  bursts, do not hold up anyone's ping by more than a few frames.
* Events for sessions the connection subscribed to arrive as notifications
  (``{"jsonrpc":"2.0","method":"event","params":…}``). Replies and events share
  one write path: straight to the socket, with what the kernel does not take
  kept in a bounded backlog. A reader that leaves more than
  :data:`BACKLOG_LIMIT` bytes of earlier replies (or :data:`EVENT_BACKLOG_LIMIT`
  of events) unread, or takes nothing for :data:`SEND_TIMEOUT`, is dropped,
  never waited on; the reply being written never counts against either.

Resource handling: each connection runs in its own task group (its reading
task, the requests that wait, the writer of its backlog) and is closed in
``finally``. Error handling: any exception inside a connection is logged and ends
that connection only; ``accept`` errors from descriptor or memory exhaustion are
logged and retried after 100 ms (trio's ``_highlevel_serve_listeners``), so the
accept loop survives its clients. anyio reports them as ``BrokenResourceError``
with the ``OSError`` as its cause, so the cause is what is looked at; any other
accept failure is logged and raised, so the daemon exits (and its supervisor
restarts it) rather than living on with no listener.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import itertools
import logging
import os
import select
import socket
import time
from collections import deque

import anyio
from anyio.abc import ByteStream, SocketAttribute, SocketListener, TaskGroup, UNIXSocketStream
from msgspec import Raw

from meshd.frames import FrameReader, FrameTooLong, OverBudget, PartialBudget
from meshd.protocol.errors import INVALID_REQUEST, Forbidden, MeshError, MeshUnavailable
from meshd.protocol.framing import DELIMITER, MAX_FRAME
from meshd.protocol.jsonrpc import (
    Call,
    Dispatcher,
    Later,
    encoder,
    error_object,
    error_response,
    reply,
    run,
    start,
)
from meshd.protocol.trust import peer_credentials
from meshd.service import Conn, Service

log = logging.getLogger("meshd.server")

BACKLOG_LIMIT = 16 * 1024 * 1024
"""Bytes of earlier replies one connection may leave unread before it is dropped. The
reply being written never counts against it: a client gets its answer however big
(a reader that stops reading is dropped after :data:`SEND_TIMEOUT`)."""
EVENT_BACKLOG_LIMIT = 256 * 1024
"""A subscriber this far behind on events (about 700 message events) is dropped:
events wait in the inbox anyway, and a stalled reader must not cost memory. Only
event bytes count: a big reply in the backlog does not make a subscriber "behind"."""
MAX_INFLIGHT = 128
HANGUP_POLL = 0.1  # how often a connection that is not being read is checked for a hang-up
"""Concurrent requests (waits, asks) one connection may have running at once. At the
bound the connection's frames are not read until one finishes: the client's writes
back up in its own socket buffer instead of the daemon queueing without limit."""
SEND_TIMEOUT = 10.0
ACCEPT_BURST = 256
"""Connections taken from the backlog in one go after each accept."""
ACCEPT_RETRY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
"""Resource exhaustion: wait 100 ms (connections close meanwhile), then accept again."""
ACCEPT_SKIP_ERRNOS = {errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.EINTR}
"""That one connection failed (trio ignores these too): accept the next at once."""
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
BURST_FRAMES_PER_TURN = 2
"""Frames of pipelined bursts (a connection with more frames already read) started per
pass of the event loop, over all connections together. A request that arrives alone
(a ping) waits for at most this many burst frames, not one per bursting connection:
with 100 connections pipelining 100 queued acquires each, a pass used to start 100 of
them (~14 ms of CPU) before anyone else's request."""
IDLE_CHECK_INTERVAL = 1.0
"""How often connections are looked at for the idle timeout."""

_DISCONNECTS = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)
"""The client went away: the end of a connection, not a failure."""


_HANGUP = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


def peer_gone(sock: socket.socket) -> bool:
    """Whether the peer hung up, without reading (POLLRDHUP where the OS has it)."""
    poller = select.poll()
    poller.register(sock.fileno(), _HANGUP)
    return bool(poller.poll(0))


def _readable(sock: socket.socket | None) -> bool:
    """Whether bytes (or a hang-up) wait to be read on ``sock``, without reading them."""
    if sock is None:
        return False
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


class Connection:
    """One client: its stream, and one write path for replies and events alike.

    Writes go straight to the non-blocking socket when nothing is waiting to be
    written, which is nearly always: no lock, no task switch, no timer per reply.
    What the kernel does not take waits in :attr:`backlog` (bounded by
    :data:`BACKLOG_LIMIT` bytes) and one flusher task writes it out as the socket
    drains. A reader that falls that far behind, or makes no progress for
    :data:`SEND_TIMEOUT`, is dropped, never waited on.
    """

    def __init__(self, stream: ByteStream, conn: Conn, tg: TaskGroup) -> None:
        self.stream = stream
        self.conn = conn
        self.tg = tg
        self.closed = False
        self.inflight = anyio.Semaphore(MAX_INFLIGHT)
        self.sock: socket.socket | None = None
        self.backlog = bytearray()
        self._parts: deque[list[int]] = deque()  # [is_event, bytes left] per frame queued
        self._queued = [0, 0]  # bytes of [replies, events] in the backlog
        self._flushing = False
        self.last_frame = time.monotonic()
        """When the last whole frame arrived (the idle timeout counts from here)."""
        self.reader: FrameReader | None = None
        self.later: set[Later] = set()
        """Requests waiting as records (a queued claim), no task: withdrawn at close."""

    async def send(self, frame: bytes) -> None:
        """Write one reply frame (never blocks; see :meth:`write`)."""
        self.write(frame + DELIMITER, 0)

    def push(self, frame: bytes) -> None:
        """Write one event frame without waiting; drop the connection if it fell behind."""
        self.write(frame + DELIMITER, 1)

    def _sent(self, n: int) -> None:
        """``n`` bytes from the front of the backlog went out: count them off."""
        del self.backlog[:n]
        while n and self._parts:
            part = self._parts[0]
            took = min(n, part[1])
            part[1] -= took
            self._queued[part[0]] -= took
            n -= took
            if not part[1]:
                self._parts.popleft()

    def write(self, data: bytes, event: int) -> None:
        if self.closed:
            return
        if not self.backlog and self.sock is not None:
            try:
                sent = self.sock.send(data)
            except BlockingIOError:
                sent = 0
            except OSError as exc:  # the client went away: the end, not a failure
                log.debug("connection %d went away before its reply: %r", self.conn.id, exc)
                self.close()
                return
            if sent == len(data):
                return
            data = data[sent:]
        ahead = self._queued[event]  # this kind's bytes already waiting, before this frame
        self.backlog += data
        self._parts.append([event, len(data)])
        self._queued[event] += len(data)
        over = self._queued[1] > EVENT_BACKLOG_LIMIT if event else ahead > BACKLOG_LIMIT
        if over:
            what = "events behind" if event else "replies unread"
            log.info(
                "connection %d has %d bytes of %s (stopped reading); dropped",
                self.conn.id, self._queued[event], what,
            )  # fmt: skip
            self.close()
            return
        if not self._flushing:
            self._flushing = True
            self.tg.start_soon(self._flush)

    async def _flush(self) -> None:
        try:
            while self.backlog and not self.closed:
                with anyio.move_on_after(SEND_TIMEOUT) as scope:
                    await anyio.wait_writable(self.sock)  # type: ignore[arg-type]
                if scope.cancelled_caught:
                    log.info("connection %d stopped reading; dropped", self.conn.id)
                    self.close()
                    return
                assert self.sock is not None
                try:
                    sent = self.sock.send(self.backlog)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    log.debug("connection %d went away: %r", self.conn.id, exc)
                    self.close()
                    return
                self._sent(sent)
        finally:
            self._flushing = False

    def close(self) -> None:
        self.closed = True
        self.tg.cancel_scope.cancel()

    def busy(self) -> bool:
        """Whether the daemon owes this connection something: a running wait or ask,
        or replies and events it has not taken yet."""
        return self.inflight.value < MAX_INFLIGHT or bool(self.backlog)


class Turns:
    """Pipelined bursts take turns: :data:`BURST_FRAMES_PER_TURN` frames per loop pass.

    A connection that has its next frame read already (the client pipelines) calls
    :meth:`wait` before starting it. At most ``per_turn`` such frames are let go per
    pass of the event loop, over all connections, in arrival order; so every burst
    advances, and a request that came alone is started in the next pass whatever the
    number of bursting connections. A lone burst goes on at one frame per pass, as
    with a plain yield.
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
            loop.call_soon(self._tick)
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
            self._loop.call_soon(self._tick)
        else:
            self._armed = False


class Server:
    """Serves one or more listeners with the same :class:`Service`."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.rpc = Dispatcher(service.lookup)
        self.connections: dict[int, Connection] = {}
        self._ids = itertools.count(1)
        self._uid = os.geteuid()
        self.per_uid: dict[int, int] = {}
        """Open connections per peer uid (foreign ones too, until refused)."""
        self.partial = PartialBudget()
        self.turns = Turns()
        self._next_idle_check = 0.0

    def stats(self) -> dict[str, int]:
        return {"connections": len(self.connections)}

    # --- accept loop ----------------------------------------------------------------

    async def serve(
        self,
        listener: SocketListener,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept until cancelled or the listener is closed."""
        async with listener, anyio.create_task_group() as tg:
            task_status.started()
            while True:
                try:
                    stream = await listener.accept()
                except anyio.ClosedResourceError:
                    return  # we closed the listener: shutting down
                except (OSError, anyio.BrokenResourceError) as exc:
                    # anyio wraps accept()'s OSError in BrokenResourceError (cause
                    # kept), so the errno is looked for on both.
                    err = exc if isinstance(exc, OSError) else exc.__cause__
                    code = err.errno if isinstance(err, OSError) else None
                    if code in ACCEPT_SKIP_ERRNOS:
                        continue  # that one client went away before we took it
                    if code in ACCEPT_RETRY_ERRNOS:
                        assert isinstance(err, OSError)
                        log.warning("accept failed (%s); retrying in 100 ms", err.strerror)
                        await anyio.sleep(0.1)
                        continue
                    log.error("accept failed for good: %r (cause %r)", exc, err)
                    raise
                tg.start_soon(self._handle, stream)
                await self._accept_backlog(listener, tg)

    async def _accept_backlog(self, listener: SocketListener, tg: TaskGroup) -> None:
        """Take every connection already waiting, not one per loop turn.

        anyio accepts one connection per pass of the event loop, so under load a
        burst of 1,000 clients waited behind busy connections for seconds (bench
        finding 10). Errors here are left for the next ``accept()`` to report.
        """
        raw = listener.extra(SocketAttribute.raw_socket)
        for _ in range(ACCEPT_BURST):
            try:
                sock, _addr = raw.accept()
            except OSError:  # BlockingIOError: nothing waiting; the rest: accept() reports
                return
            sock.setblocking(False)
            tg.start_soon(self._handle, await UNIXSocketStream.from_socket(sock))

    async def _handle(self, stream: ByteStream) -> None:
        conn = Conn(next(self._ids))
        c: Connection | None = None
        counted: int | None = None
        try:
            sock = stream.extra(SocketAttribute.raw_socket)
            conn.peer_pid, uid = peer_credentials(sock)
            counted = uid
            self.per_uid[uid] = self.per_uid.get(uid, 0) + 1
            if (refusal := self._refusal(uid)) is not None:
                await stream.send(
                    encoder.encode(error_response(None, refusal.to_wire())) + DELIMITER
                )
                return
            async with anyio.create_task_group() as tg:
                c = Connection(stream, conn, tg)
                c.sock = sock
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
                self._uncount(counted)
            if c is not None:
                c.closed = True
                if c.reader is not None:
                    c.reader.release()
                    c.reader = None
                while c.later:  # its waiting records withdraw, as its waiting tasks did
                    c.later.pop().cancel()
                self.connections.pop(conn.id, None)
                self.service.connection_closed(conn)
            with anyio.CancelScope(shield=True):
                await stream.aclose()

    def _refusal(self, uid: int) -> MeshError | None:
        """Why a new connection of ``uid`` is refused (foreign uid, too many), or None."""
        if uid != self._uid:
            return Forbidden(f"uid {uid} may not use this mesh (owner uid {self._uid})")
        limit = self.service.state.settings.max_connections
        if self.per_uid[uid] > limit:
            log.warning("uid %d has %d connections open; refusing more", uid, limit)
            return MeshUnavailable(
                f"too many connections from uid {uid} (the limit is max_connections = "
                f"{limit}): close some, or raise max_connections in config.toml",
                {"reason": "connections", "limit": limit},
            )
        return None

    def _uncount(self, uid: int) -> None:
        left = self.per_uid[uid] - 1
        if left:
            self.per_uid[uid] = left
        else:
            del self.per_uid[uid]

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
                and not _readable(c.sock)  # a request just arrived: not idle
                and not (c.reader is not None and c.reader.buffered())
            ):
                log.debug("connection %d idle; closed", c.conn.id)
                c.close()

    async def _reader(
        self, c: Connection, batch: _Batch | None = None, *, resumed: bool = False
    ) -> None:
        """Read and serve the connection's frames until it ends, then close it.

        Every request runs right here, in turn, ``concurrent`` ones too: most of them
        (a granted claim, an ask answered at once) never wait, and cost no task. One
        that has to wait calls ``conn.detach()`` first, and this task stays with it:
        the reading goes on in a new task (``batch``: the rest of the batch it came
        in first), and this one ends once it has written that request's reply.
        """
        reader = c.reader
        assert reader is not None
        if batch is not None and await self._batch(c, batch):
            return
        if resumed and reader.buffered():
            await self.turns.wait()  # the rest of a burst: it takes turns (below)
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
            if await self._frame(c, line):
                return  # it waited: the new reader serves the connection from here
            if reader.buffered():
                # A burst of frames from one client: it takes turns with the other
                # bursts, a few frames per pass of the loop (Turns), so nobody's
                # burst (a storm of 10,000 queued acquires) delays anyone else's
                # one request by more than a few frames.
                await self.turns.wait()
        if c.inflight.value < MAX_INFLIGHT and not c.closed:
            # Requests of it still wait, and closing withdraws each (up to 128): closes
            # take turns too, so 100 clients hanging up at once do not stall the loop
            # for all their waits in one pass.
            await self.turns.wait()
        c.close()

    async def _frame(self, c: Connection, line: bytes) -> bool:
        """Serve one frame; True when a request of it detached (see :meth:`_reader`)."""
        body = line.strip()
        if not body:
            return False
        if body[0] == 0x5B:  # "[": a batch
            items = self.rpc.batch(body)
            if isinstance(items, bytes):
                c.write(items + DELIMITER, 0)
                return False
            return await self._batch(c, _Batch(items))
        call = self.rpc.prepare(body)
        if not isinstance(call, Call):
            if call is not None:
                c.write(call + DELIMITER, 0)
            return False
        if not call.handler.concurrent:
            reply = await run(call, c.conn)
            if reply is not None:
                c.write(reply + DELIMITER, 0)
            return False
        detach = _Detach(self, c, None)
        out = await self._run(c, call, detach)
        if isinstance(out, Later):
            self._later(c, call, out, None, 0)
        elif out is not None:
            c.write(out + DELIMITER, 0)
        return detach.fired

    async def _run(self, c: Connection, call: Call, detach: _Detach) -> bytes | Later | None:
        """Run a ``concurrent`` call here, holding one of the connection's slots (a
        :class:`Later` it returns keeps the slot until it is answered: :meth:`_later`)."""
        if not await self._slot(c):
            c.close()  # the client hung up while we were not reading it
            return None
        conn = c.conn
        conn.detach = detach
        out: bytes | Later | None = None
        try:
            out = await start(call, conn)
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
            if conn.detach is detach:
                conn.detach = _stay

    def _later(self, c: Connection, call: Call, later: Later, b: _Batch | None, i: int) -> None:
        """Answer ``later`` once settled (``b``: as element ``i`` of that batch), like a
        request that waited in a task, and free its slot; until then, closing the
        connection withdraws it (:meth:`_handle`)."""
        c.later.add(later)
        later.bind(_Answer(c, call, b, i))

    async def _batch(self, c: Connection, b: _Batch) -> bool:
        """Start a batch's elements in order, from ``b.next``; True when one detached.

        A batch is answered as one array, once its last element is done (SPEC §3:
        batches are not atomic). An element that waits does not hold up the ones
        after it, nor the connection's next frames: like a request of its own, it
        detaches, and a new reader starts the rest. The elements take turns with
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
                detach = _Detach(self, c, b)
                out = await self._run(c, call, detach)
                if isinstance(out, Later):
                    self._later(c, call, out, b, i)  # b.open stays counted until answered
                    continue
                b.replies[i] = out
            else:
                detach = None
                b.replies[i] = await run(call, c.conn)
            b.open -= 1
            if detach is not None and detach.fired:
                self._batch_done(c, b)
                return True
        self._batch_done(c, b)
        return False

    @staticmethod
    def _batch_done(c: Connection, b: _Batch) -> None:
        """Write the batch's reply if every element is started and done."""
        if b.open or b.next < len(b.items):
            return
        replies = [r for r in b.replies if r is not None]
        if replies:
            c.write(b"[" + b",".join(replies) + b"]" + DELIMITER, 0)

    # --- backpressure ---------------------------------------------------------------

    @staticmethod
    async def _slot(c: Connection) -> bool:
        """Take one of the connection's MAX_INFLIGHT slots; False if the peer left.

        A free one is taken at once. Else the connection is not read until one is
        free (that is the backpressure), so a hang-up would go unseen and the
        connection's waits would linger: the socket is polled for it every 100 ms
        meanwhile.
        """
        try:
            c.inflight.acquire_nowait()
            return True
        except anyio.WouldBlock:
            pass
        while True:
            with anyio.move_on_after(HANGUP_POLL):
                await c.inflight.acquire()
                return True
            if c.sock is not None and peer_gone(c.sock):
                return False


def _stay() -> None:
    """``conn.detach`` outside a ``concurrent`` call: nothing to detach."""


class _Detach:
    """``conn.detach`` for one ``concurrent`` call run by a reader: the first call
    starts a new reader (:meth:`Server._reader`), so the connection goes on serving
    while this call waits in the task that ran it. A call from any other task (an
    earlier request that detached already and calls it again) does nothing: two
    readers must never read one connection."""

    __slots__ = ("batch", "c", "fired", "server", "task")

    def __init__(self, server: Server, c: Connection, batch: _Batch | None) -> None:
        self.server = server
        self.c = c
        self.batch = batch
        self.fired = False
        self.task = asyncio.current_task()

    def __call__(self) -> None:
        if not self.fired and asyncio.current_task() is self.task:
            self.fired = True
            self.c.tg.start_soon(
                functools.partial(self.server._reader, resumed=True), self.c, self.batch
            )


class _Answer:
    """What a :class:`Later` of a connection does once settled: its reply written (or
    its batch's, once the last element is done), its slot freed. It keeps the request's
    method and id, not the :class:`Call` (whose decoded params a waiting request has
    no more use for: fewer objects for the collector to track per waiter)."""

    __slots__ = ("b", "c", "i", "method", "notify", "rid")

    def __init__(self, c: Connection, call: Call, b: _Batch | None, i: int) -> None:
        self.c = c
        self.method, self.rid, self.notify = call.method, call.rid, call.notify
        self.b = b
        self.i = i

    def __call__(self, later: Later) -> None:
        c, b = self.c, self.b
        c.later.discard(later)
        c.inflight.release()
        frame = reply(later, self.method, self.rid, self.notify)
        if b is None:
            if frame is not None:
                c.write(frame + DELIMITER, 0)
            return
        b.replies[self.i] = frame
        b.open -= 1
        Server._batch_done(c, b)


class _Batch:
    """A batch frame being served: its elements, the next to start, how many of those
    started are not done, and their replies in element order."""

    __slots__ = ("items", "next", "open", "replies")

    def __init__(self, items: list[Raw]) -> None:
        self.items = items
        self.next = 0
        self.open = 0
        self.replies: list[bytes | None] = [None] * len(items)
