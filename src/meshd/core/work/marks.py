"""What sessions read and watch on the board (SPEC §7 ``board touch --read``,
``board watch``). Pure.

A changed file is told to every other live session that claims, watches or
*recently* read an overlapping path. Overlap is by path: a watched or read
folder covers everything under it, and a changed folder covers everything under
it. "Recently" is :data:`READ_FRESH` (a read older than that no longer draws
notices; reading again refreshes it). A watch lasts as long as its session.

Marks belong to live sessions: the daemon drops a session's marks when it is
gone (:meth:`Marks.sweep`). Paths are canonical (the handler canonicalises them
like ``file:`` keys); lookups walk the changed path's ancestors in an index and
find the marked paths under it by bisection in a sorted list, so the cost
follows the path's depth and the hits, not the number of marks.

Writes: ``("board.mark", sid, path, kind, at)`` and ``("board.unmark", sid)``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import Any, Literal

from meshd.core.clock import Clock

Write = tuple[Any, ...]
Kind = Literal["read", "watch"]

READ_FRESH = 12 * 3600.0
"""Seconds a read keeps drawing changed-file notices (wall clock)."""


class Marks:
    """Reads and watches of one profile's live sessions."""

    def __init__(self, clock: Clock, *, read_fresh: float = READ_FRESH) -> None:
        self.clock = clock
        self.read_fresh = read_fresh
        self.by_session: dict[str, dict[tuple[str, Kind], float]] = {}
        self._at_path: dict[str, set[tuple[str, Kind]]] = {}
        self._paths: list[str] = []
        self.writes: list[Write] = []

    def restore(self, rows: Iterable[tuple[str, str, str, float]]) -> None:
        for sid, path, kind, at in rows:
            if kind in ("read", "watch"):
                self._set(sid, path, kind, at)  # type: ignore[arg-type]

    def touch(self, sid: str, paths: Iterable[str], kind: Kind) -> int:
        """Record that ``sid`` read (or watches) ``paths``; how many."""
        now = self.clock.now()
        n = 0
        for path in dict.fromkeys(paths):
            self._set(sid, path, kind, now)
            self.writes.append(("board.mark", sid, path, kind, now))
            n += 1
        return n

    def untouch(self, sid: str, paths: Iterable[str], kind: Kind) -> int:
        """``sid`` no longer reads (or watches) ``paths``; how many it had."""
        n = 0
        for path in dict.fromkeys(paths):
            if self._unset(sid, path, kind):
                self.writes.append(("board.unmark_path", sid, path, kind))
                n += 1
        return n

    def put_back(self, sid: str, before: dict[tuple[str, Kind], float]) -> None:
        """Undo a change the disk refused: ``sid``'s marks as they were (nothing stored)."""
        for path, kind in list(self.by_session.get(sid, {})):
            self._unset(sid, path, kind)
        for (path, kind), at in before.items():
            self._set(sid, path, kind, at)

    def overlapping(self, paths: Iterable[str]) -> dict[str, Kind]:
        """Sessions with a watch or a fresh read overlapping any of ``paths``
        (a session that does both counts as ``watch``)."""
        fresh_from = self.clock.now() - self.read_fresh
        out: dict[str, Kind] = {}
        for path in paths:
            for marked in self._overlapping_paths(path):
                for sid, kind in self._at_path.get(marked, ()):
                    if kind == "read" and self.by_session[sid][(marked, kind)] < fresh_from:
                        continue
                    if out.get(sid) != "watch":
                        out[sid] = kind
        return out

    def of(self, sid: str) -> list[tuple[str, Kind, float]]:
        """``sid``'s marks: (path, kind, at), by path."""
        return sorted((p, k, at) for (p, k), at in self.by_session.get(sid, {}).items())

    def under(self, folder: str) -> list[tuple[str, str, Kind, float]]:
        """Every mark at or under ``folder``: (session, path, kind, at), by path."""
        out = []
        for path in self._overlapping_paths(folder):
            if path == folder or path.startswith(folder.rstrip("/") + "/"):
                for sid, kind in sorted(self._at_path.get(path, ())):
                    out.append((sid, path, kind, self.by_session[sid][(path, kind)]))
        return sorted(out, key=lambda m: (m[1], m[0]))

    def sweep(self, live: Callable[[str], bool]) -> None:
        """Drop the marks of sessions that are gone."""
        for sid in [s for s in self.by_session if not live(s)]:
            self.forget(sid)

    def forget(self, sid: str) -> None:
        marks = self.by_session.get(sid)
        if marks is None:
            return
        for path, kind in list(marks):
            self._unset(sid, path, kind)
        self.writes.append(("board.unmark", sid))

    def drain(self) -> list[Write]:
        writes, self.writes = self.writes, []
        return writes

    def _set(self, sid: str, path: str, kind: Kind, at: float) -> None:
        self.by_session.setdefault(sid, {})[(path, kind)] = at
        holders = self._at_path.get(path)
        if holders is None:
            holders = self._at_path[path] = set()
            bisect.insort(self._paths, path)
        holders.add((sid, kind))

    def _unset(self, sid: str, path: str, kind: Kind) -> bool:
        marks = self.by_session.get(sid)
        if marks is None or marks.pop((path, kind), None) is None:
            return False
        if not marks:
            del self.by_session[sid]
        holders = self._at_path.get(path)
        if holders is not None:
            holders.discard((sid, kind))
            if not holders:
                del self._at_path[path]
                i = bisect.bisect_left(self._paths, path)
                if i < len(self._paths) and self._paths[i] == path:
                    del self._paths[i]
        return True

    def _overlapping_paths(self, path: str) -> list[str]:
        """Marked paths equal to ``path``, above it, or under it."""
        path = path.rstrip("/") or "/"
        out = []
        prefix = path
        while True:
            if prefix in self._at_path:
                out.append(prefix)
            if prefix == "/":
                break
            prefix = prefix.rsplit("/", 1)[0] or "/"
        below = path + "/" if path != "/" else "/"
        i = bisect.bisect_left(self._paths, below)
        while i < len(self._paths) and self._paths[i].startswith(below):
            out.append(self._paths[i])
            i += 1
        return out
