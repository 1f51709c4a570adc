"""``AsyncSession.on_preempt`` (SPEC §5b): preempt events to a callback, for the anyio client.

:class:`AsyncPreemptWatcher` holds an :class:`AsyncConnection` of its own, subscribed to
the session's events, and calls the callback (a coroutine function or a plain one)
with each ``preempt`` event (decoded by :mod:`meshctl._events`) from a task of the
``AsyncMesh``'s task group -- the blocking :mod:`meshctl._sync.preempt`'s rules. The
subscription makes pushed messages count as ``delivered`` (never ``read``): they stay
in the inbox. A preemption that arrives while nobody watches waits there as a notice.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from meshctl import _events
from meshctl import _log as log
from meshctl._async.connection import AsyncConnection
from meshd.protocol.errors import MeshError

if TYPE_CHECKING:
    from meshctl._async.session import AsyncSession

_POLL = 0.5


class AsyncPreemptWatcher:
    """Calls ``callback(event)`` for each ``preempt`` event of ``session`` until stopped."""

    def __init__(
        self, session: AsyncSession, callback: Callable[[_events.PreemptEvent], Any]
    ) -> None:
        self.session = session
        self.callback = callback
        self.seen = 0  # preempt events handed to the callback
        self._scope = anyio.CancelScope()
        self._conn: AsyncConnection | None = None

    async def start(self) -> AsyncPreemptWatcher:
        """Subscribe, then watch from a task; a subscription that fails is logged (the
        session goes on without it), as the blocking watcher does."""
        tg = self.session.mesh._tg
        if tg is None:
            raise MeshError("use the AsyncMesh inside `async with`")
        conn = AsyncConnection(self.session.mesh)
        try:
            await conn.open()
            await conn.call("events.subscribe", {"session_id": self.session.session_id})
        except MeshError as exc:
            with anyio.CancelScope(shield=True):
                await conn.aclose()
            log.warning("Session Mesh: on_preempt could not subscribe: %s", exc)
            return self
        self._conn = conn
        tg.start_soon(self._run, conn)
        return self

    async def stop(self) -> None:
        """Stop watching and close the connection."""
        self._scope.cancel()
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.aclose()

    async def _run(self, conn: AsyncConnection) -> None:
        try:
            with self._scope:
                while self.session.active:
                    try:
                        raw = await conn.next_event(_POLL)
                    except MeshError as exc:
                        log.warning("Session Mesh: on_preempt lost its connection: %s", exc)
                        return
                    if raw is None or raw.get("kind") != "preempt":
                        continue
                    try:
                        event = _events.decode(raw)
                    except MeshError:
                        continue
                    if isinstance(event, _events.PreemptEvent):
                        self.seen += 1
                        try:
                            handled = self.callback(event)
                            if inspect.isawaitable(handled):
                                await handled
                        except Exception:
                            log.exception("on_preempt callback failed")
        finally:
            self._conn = None
            with anyio.CancelScope(shield=True):
                await conn.aclose()
