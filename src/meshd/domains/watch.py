"""``mesh.watch``: tell viewers (``meshctl top``) what changed, pushed, never polled.

Every commit is seen here (:meth:`WatchHandlers.committed`, only what is durable);
the areas it touched are gathered and sent as one ``mesh.changed`` event to the
watching connections at the next sweeper tick, so a burst of thousands of writes
costs the viewers four events a second at most, and costs nothing without viewers.
"""

from __future__ import annotations

from meshd.core.state import Event, Write
from meshd.domain import Domain
from meshd.protocol import watch as pw
from meshd.protocol.contract import rfc3339
from meshd.protocol.events import MeshChangedEvent
from meshd.protocol.methods import Empty
from meshd.service import Conn, Service

#: Write kinds whose area is not their prefix.
_AREA = {"fencing": "claim", "meta": "session"}


def area(kind: str) -> str:
    """``claim.audit`` → ``claim``: what a write or event kind is about."""
    head = kind.split(".", 1)[0]
    return _AREA.get(head, head)


class WatchHandlers(Domain):
    name = "watch"

    def __init__(self, svc: Service) -> None:
        super().__init__(svc)
        self._changed: set[str] = set()

    def install(self) -> None:
        self.svc.add(pw.MESH_WATCH, self.watch)

    def watch(self, p: Empty, conn: Conn) -> pw.WatchResult:
        self.svc.subscribe(conn, pw.WATCH_CHANNEL)
        return pw.WatchResult(watching=True, interval=pw.WATCH_INTERVAL)

    def committed(self, writes: list[Write], events: list[Event]) -> None:
        if pw.WATCH_CHANNEL not in self.svc.subscribers:
            return
        self._changed.update(area(str(w[0])) for w in writes)
        self._changed.update(area(ev.kind) for ev in events if ev.session_id != pw.WATCH_CHANNEL)

    def sweep(self) -> None:
        if not self._changed:
            return
        what, self._changed = sorted(self._changed), set()
        if pw.WATCH_CHANNEL in self.svc.subscribers:
            body = MeshChangedEvent(
                session_id=pw.WATCH_CHANNEL, what=what, at=rfc3339(self.svc.clock.now())
            )
            self.svc.publish([Event(pw.WATCH_CHANNEL, body)])
