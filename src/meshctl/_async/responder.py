"""A session's live responder for the anyio client (``AsyncSession.on_query``, SPEC §6).

A task of the ``AsyncMesh``'s task group, with an :class:`AsyncConnection` of its
own, calls ``query.respond``, runs the handler for every query event (a coroutine
function or a plain one) and answers with ``query.answer``. What a query is and
what answers it is :mod:`meshctl._core.messaging`'s, shared with the blocking
responder (:mod:`meshctl._sync.responder`).
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from meshctl import _log as log
from meshctl._async.connection import AsyncConnection
from meshctl._core.messaging import Query, answer_params, query_of
from meshd.protocol.errors import MeshError, NotFound

if TYPE_CHECKING:
    from meshctl._async.client import AsyncMesh

_POLL = 0.25  # how often an idle responder looks whether its session is still active
_BACKOFF_FIRST = 0.5
_BACKOFF_MAX = 10.0

#: What ``on_query`` takes: the answer, or None/"" to leave it to the status responder.
QueryHandler = Callable[[Query], str | Awaitable[str | None] | None]
#: What ``on_query(on_event=...)`` takes: every other event of the session.
EventHandler = Callable[[dict[str, Any]], Any]


class _Host(Protocol):
    @property
    def mesh(self) -> AsyncMesh: ...

    @property
    def session_id(self) -> str | None: ...

    @property
    def active(self) -> bool: ...


class AsyncResponder:
    """A session's live responder task (``AsyncSession.on_query``); the fields are the
    blocking :class:`meshctl.Responder`'s: ``answered``, ``failures``, ``opted_in``."""

    def __init__(
        self, session: _Host, handler: QueryHandler, on_event: EventHandler | None
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
