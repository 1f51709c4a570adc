"""What a Hermes session writes, on the board (``board.changed``), off the hook's path.

After a successful ``write_file`` or ``patch`` the plugin reports the paths (never
the contents) so other sessions that claim, watch or read them are told. A
``board.changed`` is a durable write on the daemon: waiting for it held up every
write tool call by a round trip and an fsync (0.6 ms and more). So, as reads are
(:mod:`._reads`):

- **Off the tool's path**: the hook only notes the paths; the process's sender
  (:mod:`._sender`) sends what was noted, a session's paths in one ``board.changed``.
- **Kept while the daemon is away**: a write noted while the daemon is down (or
  hung, or before the session could register) is kept, and sent once the daemon
  is back and the session registered again -- at most :data:`MAX_KEPT` paths per
  process (beyond, the oldest are dropped first; a count of them is logged).
  Nothing is kept once its session has ended.
- **Refusals cost no other path**: a ``board.changed`` the daemon refuses whole
  (one path it takes for no key) is sent again one path a call.
"""

from __future__ import annotations

import threading
from typing import Any

from ._common import Host, Tracked, reportable
from ._sender import Outbox, Sender

#: Paths kept for sending, over every session (oldest dropped first beyond it).
MAX_KEPT = 4096
#: The daemon's limit on one ``board.changed``: paths per call.
MAX_BATCH = 1000


class Writes(Outbox):
    """Reports a process's writes on the board: noted by hooks, sent by the sender
    (tried again every :data:`._sender.RETRY` seconds while something is kept)."""

    def __init__(self, host: Host, sender: Sender) -> None:
        self.host = host
        self.sender = sender
        self._lock = threading.Lock()
        self._pending: dict[str, list[str]] = {}  # session id -> paths, oldest first
        self._count = 0
        #: board.changed calls sent, and paths dropped over MAX_KEPT (tests, bench)
        self.sent = 0
        self.dropped = 0

    def note(self, t: Tracked, paths: list[str]) -> None:
        """After a successful write: note its paths for the sender."""
        if not paths:
            return
        with self._lock:
            first = not self._pending
            mine = self._pending.get(t.session_id)
            if mine is None:
                mine = self._pending[t.session_id] = []
            for p in paths:
                if p not in mine:  # a file written again while kept: noted once
                    mine.append(p)
                    self._count += 1
            if self._count > MAX_KEPT:
                self._trim()
        if first:  # else the flush already due (or the retry of what is kept) takes it
            self.sender.wake()

    def pending(self) -> dict[str, list[str]]:
        with self._lock:
            return {sid: list(paths) for sid, paths in self._pending.items()}

    def flush_session(self, t: Tracked, link: Any) -> None:
        """Send the session's writes now (it is about to end: the daemon would refuse
        them after ``session.end``); what cannot be sent is dropped with it."""
        with self._lock:
            paths = self._pending.pop(t.session_id, [])
            self._count -= len(paths)
        if not t.registered:
            return
        for i in range(0, len(paths), MAX_BATCH):
            self._send(link, t, paths[i : i + MAX_BATCH])

    def _trim(self) -> None:
        while self._count > MAX_KEPT:
            oldest = next(iter(self._pending))
            paths = self._pending[oldest]
            paths.pop(0)
            if not paths:
                del self._pending[oldest]
            self._count -= 1
            self.dropped += 1

    def flush(self, link: Any) -> bool:
        """Send what waits: one ``board.changed`` per session (per 1,000 paths); what
        could not be sent (daemon away, session not registered) stays (True)."""
        with self._lock:
            pending, self._pending, self._count = self._pending, {}, 0
        kept: dict[str, list[str]] = {}
        for sid, paths in pending.items():
            t = self.host.sessions.get(sid)
            if t is None:
                continue  # ended: nothing of it is kept
            for i in range(0, len(paths), MAX_BATCH):
                batch = paths[i : i + MAX_BATCH]
                if not self._send(link, t, batch):
                    kept.setdefault(sid, []).extend(batch)
        if not kept:
            return False
        with self._lock:
            for sid, paths in kept.items():  # back in front of what came meanwhile
                newer = self._pending.get(sid, [])
                self._pending[sid] = paths + [p for p in newer if p not in paths]
            self._count = sum(len(v) for v in self._pending.values())
            self._trim()
        for sid in kept:  # sessions the daemon lost: register them again now
            t = self.host.sessions.get(sid)
            if t is not None:
                self.host.register_again(t)
        return True

    def _send(self, link: Any, t: Tracked, paths: list[str]) -> bool:
        """True when done with ``paths`` (recorded, or refused for good)."""
        if not t.registered or link.down:
            return False
        gone: list[bool] = []
        params = {"session_id": t.session_id, "paths": [reportable(p) for p in paths]}
        self.sent += 1
        result = link.call("board.changed", params, forgotten=lambda: gone.append(True))
        if isinstance(result, dict):
            return True
        if gone:
            self.host.forget(t.session_id)
            return False
        if link.down:
            return False
        if len(paths) > 1:  # refused whole for one path: each alone
            for path in paths:
                self._send(link, t, [path])
        return True
