"""How many sessions are stale, without visiting every session.

``mesh.info`` (``meshctl daemon status``, ``doctor``, scripts that poll it) reports
the number of stale sessions. Counting them by visiting every session took 1.5 ms
of the event loop with 10,000 sessions -- everyone's requests waited behind each
call, and a script polling it during a 10,000-waiter storm stalled the daemon ~30
times. Heartbeats come in time order, so their times form a sorted log for free:
:class:`StaleCount` keeps ``(time, session id)`` of heartbeats in a deque, takes in
the entries older than ``stale_after`` as time passes (a session whose newest entry
comes up is a candidate), and checks only the candidates when asked.

A session's heartbeat is logged only if its last logged one is ``stale_after / 4``
old or more (:data:`_LOGGED_PER_STALE_AFTER`): the log holds at most about five
entries a session whatever the heartbeat rate. Logging every heartbeat held
``stale_after / interval`` entries a session (720 with ``stale_after`` an hour and
heartbeats every 5 s, ~60 KB a session; one per call of a client heartbeating in a
loop). A heartbeat costs a dict look-up; the log is trimmed by popping from its
front on every sweep of the registry, as before.

Pure: the registry passes its sessions, the time and ``stale_after`` in.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Protocol

_LOGGED_PER_STALE_AFTER = 4
"""A session's heartbeats are logged at most this often per ``stale_after``: the log
holds about this many entries a session (one more, for the one coming up)."""


class _Beating(Protocol):
    @property
    def liveness(self) -> str: ...

    @property
    def last_hb_mono(self) -> float: ...


class StaleCount:
    """The heartbeat log and the stale candidates behind :meth:`count`.

    ``_at[sid]``: the time of ``sid``'s newest entry in the log; its newest heartbeat
    is at most ``_gap`` later (a later one would have been logged). When that newest
    entry comes up (older than ``stale_after``), the session is stale or will be
    within ``_gap`` unless it heartbeats: it becomes a candidate, and its next
    heartbeat is logged whatever its age. :meth:`count` checks each candidate by the
    registry's own rule, so the count always equals counting every session with
    ``Registry.is_stale``; it drops those that ended, became ``process`` sessions or
    were logged again. Anything that sets heartbeat times back (a restore from the
    store, an undone registration) or a new ``stale_after`` calls for a rebuild from
    the sessions, once.
    """

    __slots__ = ("_after", "_at", "_beats", "_candidates", "_gap", "_last", "_rebuild")

    def __init__(self) -> None:
        self._beats: deque[tuple[float, str]] = deque()
        self._at: dict[str, float] = {}
        self._candidates: set[str] = set()
        self._last = -math.inf
        self._after = math.nan
        self._gap = 0.0
        self._rebuild = True

    def __len__(self) -> int:
        """Entries held (log and candidates)."""
        return len(self._beats) + len(self._candidates)

    def beat(self, sid: str, t: float) -> None:
        """``sid`` heartbeated (or registered) at monotonic time ``t``."""
        at = self._at.get(sid)
        if at is not None and t - at < self._gap:
            return  # logged recently: that entry stands for this one (within _gap)
        if t < self._last:  # an injected clock went back: keep the log sorted
            self._rebuild = True
            return
        self._last = self._at[sid] = t
        self._beats.append((t, sid))

    def ended(self, sid: str) -> None:
        """``sid`` ended: no longer a candidate. Kept until the next count, the ids of
        sessions that went stale and then expired piled up while nobody asked."""
        self._candidates.discard(sid)

    def invalidate(self) -> None:
        """Heartbeat times were set back (a restore): rebuild when next used."""
        self._rebuild = True

    def advance(self, sessions: Mapping[str, _Beating], now: float, stale_after: float) -> None:
        """Take in the entries older than ``stale_after`` (the registry's sweep calls
        this every tick, so the log stays short)."""
        if self._rebuild or stale_after != self._after:
            self._start(sessions, stale_after)
        beats, at, cutoff = self._beats, self._at, now - stale_after
        while beats and beats[0][0] < cutoff:
            t, sid = beats.popleft()
            if at.get(sid) != t:
                continue  # not its newest entry
            del at[sid]
            s = sessions.get(sid)
            if s is not None and s.liveness != "process":
                self._candidates.add(sid)

    def count(self, sessions: Mapping[str, _Beating], now: float, stale_after: float) -> int:
        """Sessions with no heartbeat for more than ``stale_after`` (``process``
        sessions are never stale: SPEC §4)."""
        self.advance(sessions, now, stale_after)
        candidates, at, n = self._candidates, self._at, 0
        gone = []
        for sid in candidates:
            s = sessions.get(sid)
            if s is None or s.liveness == "process" or sid in at:
                gone.append(sid)  # ended, not beating, or logged again
            elif now - s.last_hb_mono > stale_after:
                n += 1
        candidates.difference_update(gone)
        return n

    def _start(self, sessions: Mapping[str, _Beating], stale_after: float) -> None:
        at = {sid: s.last_hb_mono for sid, s in sessions.items() if s.liveness != "process"}
        self._beats = deque(sorted((t, sid) for sid, t in at.items()))
        self._at = at
        self._candidates = set()
        self._last = self._beats[-1][0] if self._beats else -math.inf
        self._after = stale_after
        self._gap = stale_after / _LOGGED_PER_STALE_AFTER
        self._rebuild = False
