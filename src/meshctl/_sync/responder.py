"""A session's live responder for the blocking client (``Session.on_query``, SPEC §6).

A thread with a :class:`~meshctl._blocking.Connection` of its own calls
``query.respond``, runs the handler for every query event and answers with
``query.answer``. It stops when the session is no longer active, or on
:meth:`Responder.stop`; after a daemon restart it connects and opts in again. What
a query is and what answers it is :mod:`meshctl._core.messaging`'s (the async driver's
responder, :mod:`meshctl._async.responder`, reads it the same way).

Standard library only.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from meshctl import _log as log
from meshctl._blocking import Connection
from meshctl._core.messaging import Query, answer_params, query_of
from meshd.protocol.errors import MeshError, NotFound

if TYPE_CHECKING:
    from meshctl._sync.client import Mesh

_POLL = 0.25  # how often an idle responder looks whether its session is still active
_BACKOFF_FIRST = 0.5
_BACKOFF_MAX = 10.0

#: What ``on_query`` takes: the answer, or None/"" to leave it to the status responder.
QueryHandler = Callable[[Query], str | None]
#: What ``on_query(on_event=...)`` takes: every other event of the session.
EventHandler = Callable[[dict[str, Any]], Any]


class _Host(Protocol):
    mesh: Mesh

    @property
    def session_id(self) -> str | None: ...

    @property
    def active(self) -> bool: ...


class Responder:
    """A session's live responder thread (see ``Session.on_query``).

    ``answered``: queries answered so far; ``failures``: one sentence per handler
    failure or lost connection, newest last (bounded); ``opted_in``: how many times
    it connected and opted in (it does again after a daemon restart).
    """

    def __init__(
        self,
        session: _Host,
        handler: QueryHandler,
        on_event: EventHandler | None,
    ) -> None:
        self.session = session
        self.handler = handler
        self.on_event = on_event
        self.answered = 0
        self.opted_in = 0
        self.failures: deque[str] = deque(maxlen=50)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: Connection | None = None

    @property
    def running(self) -> bool:
        """Whether the thread still serves queries."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Connect and opt in now (errors raised here), then serve on a thread."""
        self._conn = self._connect()
        self._thread = threading.Thread(
            target=self._run, name=f"meshctl-responder-{self.session.session_id}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving (the daemon then answers from status again) and wait for the thread."""
        self._stop.set()
        conn = self._conn
        if conn is not None and self._thread is None:
            conn.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _connect(self) -> Connection:
        sid = self.session.session_id
        conn = Connection.like(self.session.mesh)
        try:
            conn.call("query.respond", {"session_id": sid})
            if self.on_event is not None:
                conn.call("events.subscribe", {"session_id": sid})
        except BaseException:
            conn.close()
            raise
        self.opted_in += 1
        return conn

    def _serving(self) -> bool:
        return not self._stop.is_set() and self.session.active

    def _run(self) -> None:
        backoff = _BACKOFF_FIRST
        try:
            while self._serving():
                try:
                    if self._conn is None:
                        self._conn = self._connect()
                        backoff = _BACKOFF_FIRST
                    self._serve(self._conn)
                except MeshError as exc:
                    if self._conn is not None:
                        self._conn.close()
                        self._conn = None
                    if not self._serving():
                        break
                    self._fail(f"responder connection: {exc}; retrying in {backoff:g} s")
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX)
        finally:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _serve(self, conn: Connection) -> None:
        while self._serving():
            event = conn.next_event(_POLL)
            if event is None:
                continue
            query = query_of(event)
            if isinstance(query, Query):
                self._answer(conn, query)
            elif query is not None:
                self._fail(query)
            elif self.on_event is not None:
                try:
                    self.on_event(event)
                except Exception as exc:
                    self._fail(f"on_event failed: {exc!r}", traceback=True)

    def _answer(self, conn: Connection, query: Query) -> None:
        try:
            text = self.handler(query)
        except Exception as exc:
            self._fail(f"on_query handler failed on query {query.id}: {exc!r}", traceback=True)
            return
        params = answer_params(self.session.session_id, query, text)
        if params is None:
            return
        try:
            conn.call("query.answer", params)
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
        return f"<Responder {self.session.session_id!r} running={self.running}>"
