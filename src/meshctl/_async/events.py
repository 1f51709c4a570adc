"""``session.events()``: the session's pushed events, on a subscribed connection of its own.

::

    async with s.events() as events:
        async for event in events:
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

from meshctl._async import _backend
from meshd.protocol.errors import (
    MeshError,
    MeshUnavailable,
    MethodNotFound,
    SessionExpired,
    UnknownSession,
)

if TYPE_CHECKING:
    from meshctl._async.abc import AsyncClient
    from meshctl._async.connection import AsyncConnection


#: Seconds without an event after which the iterator checks that its session still lives.
IDLE = 5.0


class AsyncSessionEvents:
    """``async for event in session.events()``: a subscribed connection of its own.

    Close it with ``aclose()`` or use it as ``async with session.events() as events``.
    """

    def __init__(self, mesh: AsyncClient, session_id: str) -> None:
        self._mesh = mesh
        self._session_id = session_id
        self._conn: AsyncConnection | None = None

    def __aiter__(self) -> AsyncSessionEvents:
        return self

    async def __anext__(self) -> Any:
        conn = self._conn or await self._subscribe()
        try:
            while (event := await conn.next_event(IDLE)) is None:
                if not await self._lives(conn):  # ended: nothing more can come
                    await self.aclose()
                    raise StopAsyncIteration
            return event
        except MeshUnavailable as exc:
            await self.aclose()
            raise MeshUnavailable(
                "the event connection to meshd closed (the daemon may have restarted); "
                "iterate session.events() again to resubscribe"
            ) from exc

    async def __aenter__(self) -> AsyncSessionEvents:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the subscription's connection."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.aclose()

    async def _lives(self, conn: AsyncConnection) -> bool:
        """Whether the session is still live (``session.get`` on the same connection)."""
        try:
            await conn.call("session.get", {"session_id": self._session_id})
        except (SessionExpired, UnknownSession):
            return False
        return True

    async def _subscribe(self) -> AsyncConnection:
        conn = await _backend.connect(self._mesh)
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
