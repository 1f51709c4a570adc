# Generated from src/meshctl/_async/events.py by scripts/unasync.py: edit that file and
# run scripts/unasync.py (scripts/test.sh fails while this one is stale).
"""``session.events()``: the session's pushed events, on a subscribed connection of its own.

::

    with s.events() as events:
        for event in events:
            ...

One source for both drivers: ``scripts/unasync.py`` writes the blocking
:mod:`meshctl._sync.events` (a plain iterator) from this file. Iterating waits for
the next pushed event (messages, claim notices, preemptions …), so the session's
plain calls never read them. Iteration stops when the session has ended (checked after
each :data:`IDLE` seconds without an event, as ``meshctl inbox --follow`` does): no
event can come for it any more.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any

from meshctl._sync import _backend
from meshd.protocol.errors import (
    MeshError,
    MeshUnavailable,
    MethodNotFound,
    SessionExpired,
    UnknownSession,
)

if TYPE_CHECKING:
    from meshctl._sync.abc import Client
    from meshctl._sync.connection import Connection


#: Seconds without an event after which the iterator checks that its session still lives.
IDLE = 5.0


class SessionEvents:
    """``for event in session.events()``: a subscribed connection of its own.

    Close it with ``close()`` or use it as ``with session.events() as events``.
    """

    def __init__(self, mesh: Client, session_id: str) -> None:
        self._mesh = mesh
        self._session_id = session_id
        self._conn: Connection | None = None

    def __iter__(self) -> SessionEvents:
        return self

    def __next__(self) -> Any:
        conn = self._conn or self._subscribe()
        try:
            while (event := conn.next_event(IDLE)) is None:
                if not self._lives(conn):  # ended: nothing more can come
                    self.close()
                    raise StopIteration
            return event
        except MeshUnavailable as exc:
            self.close()
            raise MeshUnavailable(
                "the event connection to meshd closed (the daemon may have restarted); "
                "iterate session.events() again to resubscribe"
            ) from exc

    def __enter__(self) -> SessionEvents:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the subscription's connection."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _lives(self, conn: Connection) -> bool:
        """Whether the session is still live (``session.get`` on the same connection)."""
        try:
            conn.call("session.get", {"session_id": self._session_id})
        except (SessionExpired, UnknownSession):
            return False
        return True

    def _subscribe(self) -> Connection:
        conn = _backend.connect(self._mesh)
        try:
            conn.call("events.subscribe", {"session_id": self._session_id})
        except MethodNotFound as exc:
            conn.close()
            raise MeshError(
                "this meshd does not push events yet (events.subscribe is unknown to it): "
                "upgrade and restart the daemon, or poll the inbox instead",
                {"code": "EVENTS_UNSUPPORTED"},
            ) from exc
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn
