"""The library's side of preemption (SPEC §5b): ``on_preempt``, ``pause``, ``resume``.

Standard library only. :class:`PreemptWatcher` holds a connection of its own,
subscribed to the session's events, and calls the callback with each ``preempt``
event (decoded by :mod:`meshctl._events`) on its own thread. The subscription
makes pushed messages count as ``delivered`` (never ``read``): they stay in the
inbox. A preemption that arrives while nobody watches waits there as a notice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from meshctl import _events
from meshctl import _log as log
from meshctl._blocking import Connection
from meshd.protocol.errors import MeshError

if TYPE_CHECKING:
    from meshctl._sync.session import Session

_POLL = 0.5


class PreemptWatcher:
    """Calls ``callback(event)`` for each ``preempt`` event of ``session`` until stopped."""

    def __init__(self, session: Session, callback: Callable[[_events.PreemptEvent], Any]) -> None:
        self.session = session
        self.callback = callback
        self.seen = 0  # preempt events handed to the callback
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mesh-preempt", daemon=True)

    def start(self, timeout: float = 5.0) -> PreemptWatcher:
        """Start, and return once the subscription is in place (or failed)."""
        self._thread.start()
        self._ready.wait(timeout)
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(_POLL * 4)

    def _run(self) -> None:
        mesh = self.session.mesh
        try:
            conn = Connection.like(mesh)
            conn.call("events.subscribe", {"session_id": self.session.session_id})
        except MeshError as exc:
            log.warning("Session Mesh: on_preempt could not subscribe: %s", exc)
            self._ready.set()
            return
        self._ready.set()
        try:
            while not self._stop.is_set() and self.session.active:
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
                        self.callback(event)
                    except Exception:
                        log.exception("on_preempt callback failed")
        finally:
            conn.close()
