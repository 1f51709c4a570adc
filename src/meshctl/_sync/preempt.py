# Generated from src/meshctl/_async/preempt.py by scripts/unasync.py: edit that file and
# run scripts/unasync.py (scripts/test.sh fails while this one is stale).
"""``on_preempt`` (SPEC §5b): each ``preempt`` event of a session handed to a callback.

One source for both drivers: ``scripts/unasync.py`` writes the blocking
:mod:`meshctl._sync.preempt` from this file. The watcher holds a connection of its
own, subscribed to the session's events, and calls the callback (with anyio it may
be a coroutine function) with each ``preempt`` event, decoded by
:mod:`meshctl._events`, from a loop apart from the caller (``_backend.Worker``). The
subscription makes pushed messages count as ``delivered`` (never ``read``): they stay
in the inbox. A preemption that arrives while nobody watches waits there as a notice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from meshctl import _events
from meshctl import _log as log
from meshctl._sync import _backend
from meshd.protocol.errors import MeshError

if TYPE_CHECKING:
    from meshctl._sync.abc import SessionLike
    from meshctl._sync.connection import Connection

_POLL = 0.5


class PreemptWatcher:
    """Calls ``callback(event)`` for each ``preempt`` event of ``session`` until stopped."""

    def __init__(
        self, session: SessionLike, callback: Callable[[_events.PreemptEvent], Any]
    ) -> None:
        self.session = session
        self.callback = callback
        self.seen = 0  # preempt events handed to the callback
        self._worker = _backend.Worker(session.mesh, "mesh-preempt")
        self._conn: Connection | None = None

    def start(self) -> PreemptWatcher:
        """Subscribe, then watch apart from the caller; a subscription that fails is
        logged (the session goes on without it)."""
        try:
            conn = _backend.connect(self.session.mesh)
        except MeshError as exc:
            log.warning("Session Mesh: on_preempt could not subscribe: %s", exc)
            return self
        try:
            conn.call("events.subscribe", {"session_id": self.session.session_id})
        except MeshError as exc:
            with _backend.shielded():
                conn.close()
            log.warning("Session Mesh: on_preempt could not subscribe: %s", exc)
            return self
        self._conn = conn
        self._worker.start(self._run)
        return self

    def stop(self) -> None:
        """Stop watching and close the connection."""
        self._worker.stop(_POLL * 4)
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _run(self) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            while not self._worker.stopping and self.session.active:
                try:
                    raw = conn.next_event(_POLL)
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
                        _backend.settle(self.callback(event))
                    except Exception:
                        log.exception("on_preempt callback failed")
        finally:
            self._conn = None
            with _backend.shielded():
                conn.close()
