"""Connections of their own for the anyio client: pushed events and a live responder.

:class:`AsyncConnection` is read by whoever awaits it (no reader task of its own), so
``async for event in session.events()`` can be iterated from any task, and an
:class:`AsyncResponder` (``AsyncSession.on_query``) serves queries from a task of the
``AsyncMesh``'s task group. What a query is and what answers it is
:mod:`meshctl._messaging`'s, shared with the blocking responder.
"""

from __future__ import annotations

import inspect
import logging
import socket
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from meshctl import _conn, _spawn
from meshctl._messaging import Query, answer_params, query_of
from meshd.protocol.errors import (
    MeshError,
    MeshTimeout,
    MeshUnavailable,
    MethodNotFound,
    NotFound,
)

if TYPE_CHECKING:
    from meshctl._async import AsyncMesh

log = logging.getLogger("meshctl")

BROKEN = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
    anyio.IncompleteRead,
    OSError,
)
_POLL = 0.25  # how often an idle responder looks whether its session is still active
_BACKOFF_FIRST = 0.5
_BACKOFF_MAX = 10.0


async def open_stream(
    profile: str, path: Any, autostart: bool, timeout: float
) -> anyio.abc.SocketStream:
    """A connected stream to the daemon (finding or starting it runs in a worker thread)."""
    connect = _spawn.connect_or_start
    raw = await anyio.to_thread.run_sync(connect, profile, path, autostart, timeout)
    sock = socket.socket(fileno=raw.detach())  # anyio takes socket.socket, not _socket's
    try:
        return await anyio.abc.UNIXSocketStream.from_socket(sock)
    except BaseException:
        sock.close()
        raise


class AsyncConnection:
    """A connection of its own to the daemon of ``mesh``: requests and their replies,
    pushed events kept aside for :meth:`next_event`. Any failure closes it."""

    def __init__(self, mesh: AsyncMesh) -> None:
        self._mesh = mesh
        self._proto = _conn.Protocol()
        self._stream: anyio.abc.SocketStream | None = None
        self._reader: BufferedByteReceiveStream | None = None
        self.events: deque[dict[str, Any]] = deque()

    async def open(self) -> AsyncConnection:
        """Connect and check ``mesh.info`` (protocol version, profile)."""
        mesh = self._mesh
        stream = await open_stream(mesh.profile, mesh.socket_path, mesh.autostart, mesh.timeout)
        self._stream, self._reader = stream, BufferedByteReceiveStream(stream)
        try:
            info = await self.call("mesh.info")
            _conn.check_daemon(info, str(mesh.socket_path or mesh.profile), mesh.profile)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.aclose()
            raise
        return self

    async def call(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """One request and its result (the daemon's error raised)."""
        stream = self._stream
        if stream is None:
            raise MeshUnavailable("this connection to meshd is closed")
        rid, frame = self._proto.request(method, params)
        wait = timeout or self._mesh.timeout
        try:
            await stream.send(frame)
            with anyio.fail_after(wait):
                while True:
                    msg = await self._next()
                    if isinstance(msg, _conn.Event):
                        self._keep(msg)
                    elif msg.id == rid or msg.id is None:
                        return msg.unwrap()
        except TimeoutError:
            await self.aclose()
            raise MeshTimeout(f"no reply from meshd to {method} within {wait} s") from None
        except BROKEN as exc:
            await self.aclose()
            raise MeshUnavailable(f"lost the connection to meshd: {exc!r}; retry") from exc

    async def next_event(self, timeout: float | None) -> dict[str, Any] | None:
        """The next pushed event; None when none came within ``timeout`` seconds."""
        with anyio.move_on_after(timeout):
            while not self.events:
                msg = await self._next()
                if isinstance(msg, _conn.Event):
                    self._keep(msg)
        return self.events.popleft() if self.events else None

    def _keep(self, event: _conn.Event) -> None:
        if isinstance(event.params, dict):
            self.events.append(event.params)

    async def _next(self) -> _conn.Reply | _conn.Event:
        reader = self._reader
        if reader is None:
            raise MeshUnavailable("this connection to meshd is closed")
        try:
            while not (line := await reader.receive_until(b"\n", _conn.MAX_REPLY)).strip():
                pass
        except (*BROKEN, anyio.DelimiterNotFound) as exc:
            await self.aclose()
            raise MeshUnavailable(
                "meshd closed the connection (it may have stopped or restarted)"
            ) from exc
        return _conn.parse_line(line)

    async def aclose(self) -> None:
        """Close the connection (the daemon forgets its subscriptions). Idempotent."""
        stream, self._stream, self._reader = self._stream, None, None
        self._proto.clear()
        if stream is not None:
            await stream.aclose()


class SessionEvents:
    """``async for event in session.events()``: a subscribed connection of its own.

    Close it with ``aclose()`` or use it as ``async with session.events() as events``.
    """

    def __init__(self, mesh: AsyncMesh, session_id: str) -> None:
        self._mesh = mesh
        self._session_id = session_id
        self._conn: AsyncConnection | None = None

    def __aiter__(self) -> SessionEvents:
        return self

    async def __anext__(self) -> Any:
        conn = self._conn or await self._subscribe()
        try:
            event = await conn.next_event(None)
        except MeshUnavailable as exc:
            await self.aclose()
            raise MeshUnavailable(
                "the event connection to meshd closed (the daemon may have restarted); "
                "iterate session.events() again to resubscribe"
            ) from exc
        assert event is not None  # no timeout: it waits for one
        return event

    async def __aenter__(self) -> SessionEvents:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the subscription's connection."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.aclose()

    async def _subscribe(self) -> AsyncConnection:
        conn = await AsyncConnection(self._mesh).open()
        try:
            await conn.call("events.subscribe", {"session_id": self._session_id})
        except MethodNotFound as exc:
            await conn.aclose()
            raise MeshError(
                "this meshd does not push events yet (events.subscribe is unknown to it): "
                "upgrade and restart the daemon, or poll the inbox instead",
                {"code": "EVENTS_UNSUPPORTED"},
            ) from exc
        except BaseException:
            await conn.aclose()
            raise
        self._conn = conn
        return conn


class _Host(Protocol):
    @property
    def mesh(self) -> AsyncMesh: ...

    @property
    def session_id(self) -> str | None: ...

    @property
    def active(self) -> bool: ...


Handler = Callable[[Query], "str | Awaitable[str | None] | None"]


class AsyncResponder:
    """A session's live responder task (``AsyncSession.on_query``); the fields are the
    blocking :class:`meshctl.Responder`'s: ``answered``, ``failures``, ``opted_in``."""

    def __init__(
        self, session: _Host, handler: Handler, on_event: Callable[[dict[str, Any]], Any] | None
    ) -> None:
        self.session = session
        self.handler = handler
        self.on_event = on_event
        self.answered = 0
        self.opted_in = 0
        self.failures: deque[str] = deque(maxlen=50)
        self._scope = anyio.CancelScope()
        self._conn: AsyncConnection | None = None
        self._stopped = False
        self._done = anyio.Event()
        self._answering: anyio.Event | None = None  # set when the answer in flight is sent

    @property
    def running(self) -> bool:
        """Whether the task still serves queries."""
        return self._conn is not None and not self._done.is_set()

    async def start(self) -> None:
        """Connect and opt in now (errors raised here), then serve from a task."""
        tg = self.session.mesh._tg
        if tg is None:
            raise MeshError("use the AsyncMesh inside `async with`")
        self._conn = await self._connect()
        tg.start_soon(self._run)

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop serving (the daemon then answers from status again).

        An answer already on its way is let finish (up to ``timeout`` seconds), as the
        blocking responder's ``stop`` joins its thread: the asker may already hold the
        answer, and cancelling the call then would leave ``answered`` short of it."""
        self._stopped = True
        in_flight = self._answering
        if in_flight is not None:
            with anyio.move_on_after(timeout):
                await in_flight.wait()
        self._scope.cancel()
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.aclose()

    async def _connect(self) -> AsyncConnection:
        sid = self.session.session_id
        conn = await AsyncConnection(self.session.mesh).open()
        try:
            await conn.call("query.respond", {"session_id": sid})
            if self.on_event is not None:
                await conn.call("events.subscribe", {"session_id": sid})
        except BaseException:
            with anyio.CancelScope(shield=True):
                await conn.aclose()
            raise
        self.opted_in += 1
        return conn

    def _serving(self) -> bool:
        return not self._stopped and self.session.active

    async def _run(self) -> None:
        backoff = _BACKOFF_FIRST
        try:
            with self._scope:
                while self._serving():
                    try:
                        if self._conn is None:
                            self._conn = await self._connect()
                            backoff = _BACKOFF_FIRST
                        await self._serve(self._conn)
                    except MeshError as exc:
                        if self._conn is not None:
                            await self._conn.aclose()
                            self._conn = None
                        if not self._serving():
                            break
                        self._fail(f"responder connection: {exc}; retrying in {backoff:g} s")
                        await anyio.sleep(backoff)
                        backoff = min(backoff * 2, _BACKOFF_MAX)
        finally:
            self._done.set()
            conn, self._conn = self._conn, None
            if conn is not None:
                with anyio.CancelScope(shield=True):
                    await conn.aclose()

    async def _serve(self, conn: AsyncConnection) -> None:
        while self._serving():
            event = await conn.next_event(_POLL)
            if event is None:
                continue
            query = query_of(event)
            if isinstance(query, Query):
                await self._answer(conn, query)
            elif query is not None:
                self._fail(query)
            elif self.on_event is not None:
                try:
                    handled = self.on_event(event)
                    if inspect.isawaitable(handled):
                        await handled
                except Exception as exc:
                    self._fail(f"on_event failed: {exc!r}", traceback=True)

    async def _answer(self, conn: AsyncConnection, query: Query) -> None:
        try:
            text = self.handler(query)
            if inspect.isawaitable(text):
                text = await text
        except Exception as exc:
            self._fail(f"on_query handler failed on query {query.id}: {exc!r}", traceback=True)
            return
        params = answer_params(self.session.session_id, query, text)
        if params is None:
            return
        self._answering = sent = anyio.Event()
        try:
            await conn.call("query.answer", params)
            self.answered += 1
        except NotFound as exc:  # answered elsewhere, or the asker is gone
            log.debug("query %s: %s", query.id, exc.message)
        finally:
            self._answering = None
            sent.set()

    def _fail(self, sentence: str, *, traceback: bool = False) -> None:
        self.failures.append(sentence)
        if traceback:
            log.exception("Session Mesh: %s", sentence)
        else:
            log.warning("Session Mesh: %s", sentence)

    def __repr__(self) -> str:
        return f"<AsyncResponder {self.session.session_id!r} running={self.running}>"
