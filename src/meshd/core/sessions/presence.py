"""Where sessions work: the index behind "who is at this path" (SPEC §5 ``claim.check``).

Split from :mod:`meshd.core.sessions.registry` by object. :class:`Presence` indexes live
sessions by their ``cwd`` and ``repo`` (a dict of places plus their sorted list),
and remembers which session recently changed which file. "Present at P" looks up
P's ancestors in the dict and the places under P by bisection in the sorted list,
so the cost follows the path's depth and the hits, not the number of sessions.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from meshd.core.clock import Clock
    from meshd.core.sessions.records import Session

#: Seconds a changed file keeps its writer "present" at it for ``claim.check`` (SPEC §5).
RECENT_CHANGE = 1800.0
#: Changed files remembered before the old ones are swept out.
CHANGED_CAP = 4096

Present = tuple["Session", str, str]  # (session, "cwd"|"repo"|"changed", where)


class Presence:
    """The places sessions work at, and the files they recently changed."""

    def __init__(self, clock: Clock, sessions: Mapping[str, Session]) -> None:
        self.clock = clock
        self.sessions = sessions  # the registry's, read only
        self.places: dict[str, set[str]] = {}  # cwd or repo -> sessions working there
        self._place_list: list[str] = []  # the keys of places, sorted
        self._changed: dict[str, dict[str, float]] = {}  # changed file -> {session: mono}
        self._changed_list: list[str] = []  # its keys, sorted
        self._changed_cap = CHANGED_CAP

    def place(self, s: Session) -> None:
        for where in {s.cwd, s.repo} - {None}:
            assert where is not None
            ids = self.places.get(where)
            if ids is None:
                ids = self.places[where] = set()
                bisect.insort(self._place_list, where)
            ids.add(s.session_id)

    def place_all(self, sessions: Iterable[Session]) -> None:
        """:meth:`place` each of ``sessions``, sorting the places once (a restore)."""
        places = self.places
        for s in sessions:
            for where in (s.cwd, s.repo):
                if where is not None:
                    ids = places.get(where)
                    if ids is None:
                        ids = places[where] = set()
                    ids.add(s.session_id)
        self._place_list = sorted(places)

    def unplace(self, s: Session) -> None:
        for where in {s.cwd, s.repo} - {None}:
            assert where is not None
            ids = self.places.get(where)
            if ids is not None:
                ids.discard(s.session_id)
                if not ids:
                    del self.places[where]
                    i = bisect.bisect_left(self._place_list, where)
                    del self._place_list[i]

    def present_at(self, path: str) -> list[Present]:
        """Sessions working at ``path``: their cwd or repo contains it, or lies under it,
        or they recently changed it or files under it (:meth:`changed`)."""
        out: list[Present] = []
        path = path.rstrip("/") or "/"
        prefix, places = path, self.places
        while True:
            if prefix in places:  # most folders on the way are nobody's place
                out.extend(self._at(prefix))
            if prefix == "/":
                break
            prefix = prefix.rsplit("/", 1)[0] or "/"
        below = path + "/" if path != "/" else "/"
        i = bisect.bisect_left(self._place_list, below)
        while i < len(self._place_list) and self._place_list[i].startswith(below):
            out.extend(self._at(self._place_list[i]))
            i += 1
        if self._changed_list:
            out.extend(self._changed_under(path))
        return out

    def changed(self, sid: str, paths: Iterable[str]) -> None:
        """``sid`` changed these files (canonical): it counts as present at each of them
        for :data:`RECENT_CHANGE` seconds (SPEC §5 ``claim.check``)."""
        now = self.clock.monotonic()
        for path in paths:
            who = self._changed.get(path)
            if who is None:
                who = self._changed[path] = {}
                bisect.insort(self._changed_list, path)
            who[sid] = now
        if len(self._changed_list) > self._changed_cap:
            self._forget_changes(now)

    def _forget_changes(self, now: float) -> None:
        """Drop changes older than the window (and of gone sessions); raise the cap
        if what is left is still over it, so this runs rarely."""
        for path in list(self._changed):
            who = self._changed[path]
            for sid in [s for s, t in who.items() if now - t > RECENT_CHANGE]:
                del who[sid]
            if not who:
                del self._changed[path]
        self._changed_list = sorted(self._changed)
        self._changed_cap = max(CHANGED_CAP, 2 * len(self._changed_list))

    def _changed_under(self, path: str) -> list[Present]:
        """Live sessions that recently changed ``path`` or a file under it."""
        now = self.clock.monotonic()
        out = []
        i = bisect.bisect_left(self._changed_list, path)
        below = path + "/" if path != "/" else "/"
        while i < len(self._changed_list):
            where = self._changed_list[i]
            if where != path and not where.startswith(below):
                break
            for sid, at in self._changed.get(where, {}).items():
                s = self.sessions.get(sid)
                if s is not None and now - at <= RECENT_CHANGE:
                    out.append((s, "changed", where))
            i += 1
        return out

    def _at(self, where: str) -> list[Present]:
        out = []
        for sid in self.places.get(where, ()):
            s = self.sessions[sid]
            out.append((s, "cwd" if s.cwd == where else "repo", where))
        return out
