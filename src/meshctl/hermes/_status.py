"""A session's status on the mesh (``thinking``, ``tool-running``, ``idle`` …), off the
hook's path.

Hooks report what the session does (SPEC §4: each change moves ``last_activity``).
Nothing a hook returns depends on the daemon having it, so the hook only notes the
fields and the sender (:mod:`._sender`) sends them as one ``session.heartbeat`` per
session, a few milliseconds later:

- **Latest wins**: reports noted before the sender runs are merged, as the daemon
  would apply them one after the other (a new status without an ``activity``
  clears the one before it).
- **Nothing stale after a return**: the session keeps its latest status and task
  itself (:class:`._common.Tracked`), and a registration sends them; so a report
  the daemon could not take (it was away) is not retried, and a session the daemon
  lost (the report, or a hook's call, found out) is registered again at once, with
  where it is now.
- A session that ends has its report dropped: its end says more.
"""

from __future__ import annotations

import threading
from typing import Any

from ._common import Host, Tracked
from ._sender import Outbox


class Status(Outbox):
    """Status reports noted by hooks, one merged heartbeat per session when sent."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, Any]] = {}  # session id -> fields to send
        #: heartbeats with fields sent (tests, bench)
        self.sent = 0

    def note(self, t: Tracked, fields: dict[str, Any]) -> bool:
        """Fields for ``t``'s next report (None values are not reported); True when
        nothing else waited (the sender must be woken)."""
        fields = {k: v for k, v in fields.items() if v is not None}
        with self._lock:
            first = not self._pending
            mine = self._pending.setdefault(t.session_id, {})
            if "status" in fields and "activity" not in fields:
                mine.pop("activity", None)  # the daemon clears it with a new status
            mine.update(fields)
        return first

    def flush(self, link: Any) -> bool:
        with self._lock:
            pending, self._pending = self._pending, {}
        for sid, fields in pending.items():
            t = self.host.sessions.get(sid)
            if t is None:
                continue  # ended: its end says more
            if not t.registered:  # the daemon lost it (a hook's call found out), or was
                self.host.register_again(t)  # away: registered with its status, if back
                continue
            params = {"session_id": sid, **fields}
            self.sent += 1
            link.call(
                "session.heartbeat",
                params,
                forgotten=lambda t=t, params=params: self._again(t, params, link),
            )
        return False

    def flush_session(self, t: Tracked, link: Any) -> None:
        with self._lock:
            self._pending.pop(t.session_id, None)

    def _again(self, t: Tracked, params: dict[str, Any], link: Any) -> None:
        """The daemon lost the session: register it again, then report."""
        t.registered = False
        if self.host.register(t):
            link.call("session.heartbeat", params)
