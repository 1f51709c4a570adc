"""A session's live responder (``on_query``, SPEC §6).

One source for both drivers: ``scripts/unasync.py`` writes the blocking
:mod:`meshctl._sync.responder` from this file. The responder has a connection of its
own (``_backend.connect``), calls ``query.respond``, runs the handler for every query
event (with anyio it may be a coroutine function) and answers with ``query.answer``,
from a loop apart from the caller (``_backend.Worker``: a task with anyio, a daemon
thread in the blocking client). It stops when the session is
no longer active, or on :meth:`AsyncResponder.stop`; after a daemon restart it
connects and opts in again. What a query is and what answers it is
:mod:`meshctl._core.messaging`'s.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from meshctl import _log as log
from meshctl._async import _backend
from meshctl._async._backend import EventHandler, QueryHandler
from meshctl._core.messaging import Query, answer_params, query_of
from meshd.protocol.errors import MeshError, NotFound

if TYPE_CHECKING:
    from meshctl._async.abc import AsyncSessionLike
    from meshctl._async.connection import AsyncConnection

_POLL = 0.25  # how often an idle responder looks whether its session is still active
_BACKOFF_FIRST = 0.5
_BACKOFF_MAX = 10.0


class AsyncResponder:
    """A session's live responder (see ``on_query``).

    ``answered``: queries answered so far; ``failures``: one sentence per handler
    failure or lost connection, newest last (bounded); ``opted_in``: how many times
    it connected and opted in (it does again after a daemon restart).
    """

    def __init__(
        self, session: AsyncSessionLike, handler: QueryHandler, on_event: EventHandler | None
    ) -> None:
        self.session = session
        self.handler = handler
        self.on_event = on_event
        self.answered = 0
        self.opted_in = 0
        self.failures: deque[str] = deque(maxlen=50)
        self._worker = _backend.Worker(session.mesh, f"meshctl-responder-{session.session_id}")
        self._conn: AsyncConnection | None = None

    @property
    def running(self) -> bool:
        """Whether it still serves queries."""
        return self._worker.running

    async def start(self) -> None:
        """Connect and opt in now (errors raised here), then serve apart from the caller."""
        self._conn = await self._connect()
        self._worker.start(self._run)

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop serving (the daemon then answers from status again).

        An answer already on its way is let finish (up to ``timeout`` seconds): the
        asker may already hold it, and cutting it short would leave ``answered``
        short of it."""
        await self._worker.stop(timeout)
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.aclose()

    async def _connect(self) -> AsyncConnection:
        sid = self.session.session_id
        conn = await _backend.connect(self.session.mesh)
        try:
            await conn.call("query.respond", {"session_id": sid})
            if self.on_event is not None:
                await conn.call("events.subscribe", {"session_id": sid})
        except BaseException:
            with _backend.shielded():
                await conn.aclose()
            raise
        self.opted_in += 1
        return conn

    def _serving(self) -> bool:
        return not self._worker.stopping and self.session.active

    async def _run(self) -> None:
        backoff = _BACKOFF_FIRST
        try:
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
                    await self._worker.sleep(backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX)
        finally:
            conn, self._conn = self._conn, None
            if conn is not None:
                with _backend.shielded():
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
                    await _backend.settle(self.on_event(event))
                except Exception as exc:
                    self._fail(f"on_event failed: {exc!r}", traceback=True)

    async def _answer(self, conn: AsyncConnection, query: Query) -> None:
        try:
            text = await _backend.settle(self.handler(query))
        except Exception as exc:
            self._fail(f"on_query handler failed on query {query.id}: {exc!r}", traceback=True)
            return
        params = answer_params(self.session.session_id, query, text)
        if params is None:
            return
        with self._worker.busy():  # stop() lets it finish
            try:
                await conn.call("query.answer", params)
            except NotFound as exc:  # answered elsewhere, or the asker is gone
                log.debug("query %s: %s", query.id, exc.message)
                return
            self.answered += 1

    def _fail(self, sentence: str, *, traceback: bool = False) -> None:
        self.failures.append(sentence)
        if traceback:
            log.exception("Session Mesh: %s", sentence)
        else:
            log.warning("Session Mesh: %s", sentence)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.session.session_id!r} running={self.running}>"
