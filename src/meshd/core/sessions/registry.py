"""The live session registry: who is here, what they report, when they go.

Pure and synchronous. Time comes from the injected clock; process liveness is
the shell's business (:mod:`meshd.pidwatch` tells us when a pid dies), so the
registry only records what it is told and decides expiry from its own clock.
The records it holds are in :mod:`meshd.core.sessions.records`; where sessions
work (cwd, repo, recently changed files) is indexed by :mod:`meshd.core.sessions.presence`.

Expiry uses a heap of deadlines with lazy deletion: a heartbeat only moves a
number on its session, and the sweeper re-pushes an entry that it finds early.
So a heartbeat is O(1) and a sweep is O(expired · log n).
"""

from __future__ import annotations

import heapq
import math
import os
import sys
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime

from meshd.core.clock import Clock
from meshd.core.sessions.presence import Presence, Present
from meshd.core.sessions.records import (
    SHARED,
    EndReason,
    Registration,
    Report,
    Session,
    compact,
    interned,
    validate_registration,
    validate_report,
)
from meshd.core.sessions.stale_count import StaleCount
from meshd.core.settings import Settings
from meshd.protocol.contract import REPORTED
from meshd.protocol.errors import IdInUse, SessionExpired, UnknownSession

__all__ = [
    "EndReason", "Registration", "Registry", "Report", "Session", "validate_report",
]  # fmt: skip

ENDED_MEMORY = 10_000
#: What a registration gives a session as it is (the rest is decided below).
_AS_GIVEN = tuple(
    name for name in Registration.__struct_fields__
    if name not in {
        "session_id", "tools", "accept_queries", "accept_messages", "conn_id", "replace",
    }
)  # fmt: skip
_END_TEXT: dict[str, str] = {
    "ended": "ended",
    "expired": "expired: no heartbeat in time",
    "died": "ended: its process died",
    "unbound": "ended: its connection closed",
    "replaced": "was replaced",
}


class Registry:
    """Sessions by id, their deadlines, and the recently ended."""

    def __init__(self, clock: Clock, settings: Settings, profile: str) -> None:
        self.clock = clock
        self.settings = settings
        self.profile = profile
        self.sessions: dict[str, Session] = {}
        self.ended: OrderedDict[str, str] = OrderedDict()
        self.dirty: set[str] = set()
        self.bound: dict[int, set[str]] = {}  # conn_id -> sessions bound to it
        self.presence = Presence(clock, self.sessions)
        self._heap: list[tuple[float, str]] = []
        self._ids = 0
        self._stale = StaleCount()

    # --- deadlines ---------------------------------------------------------------

    def deadline(self, s: Session) -> float:
        """When ``s`` expires if nothing else happens (``inf``: never by itself)."""
        d = math.inf
        if s.liveness == "heartbeat":
            expire = s.expire_after or self.settings.expire_after
            d = max(s.last_hb_mono + expire, s.grace_until)
        if s.unbound_at is not None:
            d = min(d, s.unbound_at + self.settings.heartbeat_interval)
        return d

    def reconfigure(self, settings: Settings) -> None:
        """Take new settings (a reload). When a deadline may come sooner (a shorter
        ``expire_after`` or ``heartbeat_interval``), every one is computed again: the
        heap holds each session's deadline under the old settings, and a silent
        session would otherwise expire that late. A later deadline needs nothing: an
        entry that comes due early is pushed again at the new one."""
        old, self.settings = self.settings, settings
        if (
            settings.expire_after >= old.expire_after
            and settings.heartbeat_interval >= old.heartbeat_interval
        ):
            return
        deadline = self.deadline
        heap = [(d, sid) for sid, s in self.sessions.items() if (d := deadline(s)) != math.inf]
        heapq.heapify(heap)
        self._heap = heap

    def _schedule(self, s: Session) -> None:
        d = self.deadline(s)
        if d != math.inf:
            heapq.heappush(self._heap, (d, s.session_id))

    def is_stale(self, s: Session, now_mono: float) -> bool:
        """No heartbeat for ``stale_after`` -- for ``heartbeat`` sessions only: a
        ``process`` session lives exactly as long as its process, so it is never
        stale while it is listed (SPEC §4); listings show its idle time instead."""
        if s.liveness == "process":
            return False
        return now_mono - s.last_hb_mono > self.settings.stale_after

    def stale_flags(self, sessions: Iterable[Session], now_mono: float) -> list[bool]:
        """:meth:`is_stale` of each of ``sessions``, in one call (a listing asks it of
        every session, and a call a session was a tenth of a listing's CPU)."""
        after = self.settings.stale_after
        return [s.liveness != "process" and now_mono - s.last_hb_mono > after for s in sessions]

    def stale_count(self, now_mono: float) -> int:
        """How many sessions :meth:`is_stale` holds stale, without visiting them all
        (:mod:`meshd.core.sessions.stale_count`)."""
        return self._stale.count(self.sessions, now_mono, self.settings.stale_after)

    # --- commands ----------------------------------------------------------------

    def new_id(self, source: str) -> str:
        """A fresh id such as ``cli:20261129-1f3a9c``."""
        stamp = datetime.fromtimestamp(self.clock.now()).strftime("%Y%m%d")
        while True:
            sid = f"{source}:{stamp}-{os.urandom(3).hex()}"
            if sid not in self.sessions:
                return sid

    def register(self, r: Registration) -> tuple[Session, bool]:
        """Add or refresh a session; ``(session, refreshed)``.

        Raises :class:`IdInUse` when the id is live under another process: the
        service checks that process and, if it is gone, expires it and retries. A
        live ``heartbeat`` session with no process is refreshed by a caller with no
        process either (a script that registers again), but a process taking it over
        is refused unless ``r.replace``: the service then ends it (``replaced``) and
        retries, and the new session is a new registration (SPEC §4).
        """
        validate_registration(r)
        sid = r.session_id or self.new_id(r.source)
        now_m, now_w = self.clock.monotonic(), self.clock.now()
        old = self.sessions.get(sid)
        if (
            old is not None
            and old.pid is not None
            and (old.pid != r.pid or (r.pid_start is not None and old.pid_start != r.pid_start))
        ):
            raise IdInUse(
                f"session {sid} is live under pid {old.pid}",
                {"session_id": sid, "pid": old.pid},
            )
        if old is not None and old.pid is None and (r.pid is not None or r.replace):
            raise IdInUse(
                f"session {sid} is live (a heartbeat session with no process); "
                "--replace takes it over",
                {"session_id": sid, "pid": None, "replace": True},
            )
        settings = self.settings
        s = Session(
            **{name: getattr(r, name) for name in _AS_GIVEN},
            session_id=sid,
            profile=self.profile,
            tools=tuple(r.tools),  # interned by compact() below
            accept_queries=settings.accept_queries if r.accept_queries is None
            else r.accept_queries,
            accept_messages=settings.accept_messages if r.accept_messages is None
            else r.accept_messages,
            started_at=old.started_at if old else now_w,
            last_heartbeat=now_w,
            last_activity=now_w,
            last_hb_mono=now_m,
            conn_id=r.conn_id if r.bind else None,
            anchors=tuple(a for a in old.anchors if a[0] != r.pid) if old else (),
            reg=old.reg if old else os.urandom(8).hex(),
        )  # fmt: skip
        compact(s)
        if old is not None:  # a person's rank outlives a re-registration
            s.rank, s.rank_by, s.rank_at = old.rank, old.rank_by, old.rank_at
        if old is not None:
            self.presence.unplace(old)
        self.sessions[sid] = s
        if s.liveness != "process":
            self._stale.beat(sid, now_m)
        self.presence.place(s)
        self.ended.pop(sid, None)
        if s.conn_id is not None:
            self.bound.setdefault(s.conn_id, set()).add(sid)
        self._schedule(s)
        return s, old is not None

    def undo_register(self, new: Session, old: Session | None) -> None:
        """Take back a registration the store refused: ``old`` is live again exactly as
        it was (a refresh), or the id is free again (a new session)."""
        if self.sessions.get(new.session_id) is not new:
            return  # changed again meanwhile: leave the newer state alone
        self.presence.unplace(new)
        self._stale.invalidate()  # old's heartbeat may have left the log meanwhile
        if old is None:
            del self.sessions[new.session_id]
            return
        self.sessions[old.session_id] = old
        self.presence.place(old)
        if old.conn_id is not None:
            self.bound.setdefault(old.conn_id, set()).add(old.session_id)
        self._schedule(old)

    def get(self, sid: str) -> Session:
        """The live session ``sid``, or the error that says why there is none."""
        s = self.sessions.get(sid)
        if s is not None:
            return s
        if sid in self.ended:
            raise SessionExpired(
                f"session {sid} {self.ended[sid]}; register again",
                {"session_id": sid, "reason": self.ended[sid]},
            )
        raise UnknownSession(f"no session {sid} in profile {self.profile}", {"session_id": sid})

    def named(self, sid: str, then: str = "") -> Session:
        """The live session ``sid`` that a call names but does not act for (a message's,
        query's or handoff's addressee): as :meth:`get`, but an ended one is said not to
        be the caller's (``data.caller`` false), who has nothing to register again;
        ``then`` says what that means."""
        s = self.sessions.get(sid)
        if s is None and sid in self.ended:
            raise SessionExpired(
                f"session {sid} {self.ended[sid]}" + (f": {then}" if then else ""),
                {"session_id": sid, "reason": self.ended[sid], "caller": False},
            )
        return self.get(sid)

    def heartbeat(self, sid: str, report: Report | None = None) -> Session:
        """Refresh liveness; apply reported fields; mark them for the next snapshot."""
        s = self.get(sid)
        s.last_hb_mono = now_m = self.clock.monotonic()
        if s.liveness != "process":
            self._stale.beat(sid, now_m)
        s.last_heartbeat = self.clock.now()
        if report is not None:
            validate_report(report)
            moved = report.cwd is not None or report.repo is not None
            if moved:
                self.presence.unplace(s)
            changed = self._apply(s, report)
            if moved:
                self.presence.place(s)
            if changed:
                s.last_activity = s.last_heartbeat
                self.dirty.add(sid)
        return s

    @staticmethod
    def _apply(s: Session, r: Report) -> bool:
        """Apply a report. ``activity`` says what the current status is about
        ("running tests"), so a new status without one clears it."""
        changed = False
        if r.status is not None and r.status != s.status and r.activity is None:
            s.activity = ""
        for name in REPORTED:
            value = getattr(r, name)
            if name == "tools" and value is not None:
                value = tuple(map(sys.intern, value))
            elif name in SHARED:
                value = interned(value)
            if value is not None and value != getattr(s, name):
                setattr(s, name, value)
                changed = True
        return changed or r.activity is not None

    def end(self, sid: str, reason: EndReason = "ended") -> Session:
        """Remove a live session and remember why (so its next call says so)."""
        s = self.get(sid)
        del self.sessions[sid]
        self.presence.unplace(s)
        self.dirty.discard(sid)
        self._stale.ended(sid)
        self.ended[sid] = _END_TEXT[reason]
        while len(self.ended) > ENDED_MEMORY:
            self.ended.popitem(last=False)
        return s

    def attach(self, sid: str, pid: int, start: int | None) -> Session:
        """Anchor ``sid`` to one more process: it lives while any of them lives."""
        s = self.get(sid)
        if (pid, start) not in s.pids():
            if s.pid is None:
                s.pid, s.pid_start = pid, start
            else:
                s.anchors = (*s.anchors, (pid, start))
        return s

    def process_gone(self, sid: str, pid: int) -> bool:
        """One process of ``sid`` exited; True when it was the last one."""
        s = self.sessions.get(sid)
        if s is None:
            return False
        s.anchors = tuple(a for a in s.anchors if a[0] != pid)
        if s.pid == pid:
            if s.anchors:
                (s.pid, s.pid_start), s.anchors = s.anchors[0], s.anchors[1:]
            else:
                s.pid, s.pid_start = None, None
        return s.pid is None

    def connection_closed(self, conn_id: int) -> list[Session]:
        """Start the one-interval grace of sessions bound to a closed connection."""
        now = self.clock.monotonic()
        bound = self.bound.pop(conn_id, set())
        hit = [
            s for sid in bound if (s := self.sessions.get(sid)) is not None and s.conn_id == conn_id
        ]
        for s in hit:
            s.conn_id = None
            s.unbound_at = now
            self._schedule(s)
        return hit

    def due(self) -> list[tuple[Session, EndReason]]:
        """Sessions whose deadline has passed, with why; they are not removed here."""
        now = self.clock.monotonic()
        self._stale.advance(self.sessions, now, self.settings.stale_after)  # keeps its log short
        out: list[tuple[Session, EndReason]] = []
        seen: set[str] = set()
        while self._heap and self._heap[0][0] <= now:
            _, sid = heapq.heappop(self._heap)
            s = self.sessions.get(sid)
            if s is None or sid in seen:
                continue
            d = self.deadline(s)
            if d <= now:
                seen.add(sid)
                unbound = s.unbound_at is not None and (
                    s.unbound_at + self.settings.heartbeat_interval <= now
                )
                out.append((s, "unbound" if unbound else "expired"))
            elif d != math.inf:
                heapq.heappush(self._heap, (d, sid))
        return out

    def stalled(self) -> list[Session]:
        """The daemon itself did not run for a while (SIGSTOP, a long pause): give every
        ``heartbeat`` session one ``stale_after`` of grace, as after a restart.

        Its clients went on heartbeating into sockets nobody read; expiring them on
        resume, before those heartbeats are read, would end sessions that are alive.
        """
        now = self.clock.monotonic()
        out = []
        for s in self.sessions.values():
            if s.liveness == "heartbeat":
                s.grace_until = max(s.grace_until, now + self.settings.stale_after)
                self._schedule(s)
                out.append(s)
        return out

    def restore(self, s: Session) -> None:
        """Take back one session read from the store (:meth:`restore_all`)."""
        self.restore_all((s,))

    def restore_all(self, sessions: Iterable[Session]) -> None:
        """Take back the sessions read from the store after a restart, in one pass.

        The monotonic fields are rebuilt from wall time; ``heartbeat`` sessions
        get one ``stale_after`` of grace to heartbeat again. One pass because the
        daemon answers nobody until it is done: with 10,000 sessions to restore, one
        clock reading, one heapify and one sort of the places instead of 10,000
        each (bench: daemon start to first answer).
        """
        now_m, now_w = self.clock.monotonic(), self.clock.now()
        st = self.settings
        grace = now_m + st.stale_after
        # A bound session's connection died with the old daemon: same grace as a closed one.
        unbound = now_m + st.stale_after - st.heartbeat_interval
        unbound_end = unbound + st.heartbeat_interval
        expire, inf = st.expire_after, math.inf
        table = self.sessions
        restored: list[Session] = []
        due: list[tuple[float, str]] = []
        append, add_due = restored.append, due.append
        # deadline() inlined (10,000 calls were a sixth of the restore); the tests
        # check that every entry equals deadline(s).
        for s in sessions:
            age = now_w - s.last_heartbeat
            s.last_hb_mono = hb = now_m - age if age > 0.0 else now_m
            s.conn_id = None
            compact(s)
            table[s.session_id] = s
            append(s)
            if s.liveness == "heartbeat":
                s.grace_until = grace
                d = max(hb + (s.expire_after or expire), grace)
            else:
                s.grace_until = 0.0
                d = inf
            if s.bind:
                s.unbound_at = unbound
                d = min(d, unbound_end)
            else:
                s.unbound_at = None
            if d != inf:
                add_due((d, s.session_id))
        self.presence.place_all(restored)
        self._stale.invalidate()  # heartbeat times rebuilt, some earlier than logged
        if self._heap:
            for entry in due:
                heapq.heappush(self._heap, entry)
        else:
            self._heap = due
            heapq.heapify(due)

    # --- where sessions work -------------------------------------------------------

    def present_at(self, path: str) -> list[Present]:
        """Sessions working at ``path`` (:meth:`Presence.present_at`)."""
        return self.presence.present_at(path)

    def changed(self, sid: str, paths: Iterable[str]) -> None:
        """``sid`` changed these files (:meth:`Presence.changed`)."""
        self.presence.changed(sid, paths)

    def rank(self, sid: str) -> int:
        """``sid``'s rank (0 for a session that is gone): the claim table's ``rank_of``."""
        s = self.sessions.get(sid)
        return 0 if s is None else s.rank

    def ancestors(self, sid: str) -> tuple[str, ...]:
        """``parent`` chain of ``sid``, nearest first (cycles cut)."""
        out: list[str] = []
        cur = self.sessions.get(sid)
        while cur is not None and cur.parent and cur.parent not in out and cur.parent != sid:
            out.append(cur.parent)
            cur = self.sessions.get(cur.parent)
        return tuple(out)
