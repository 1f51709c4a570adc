"""``board.post``, ``board.touch``, ``board.watch``, ``board.show``: the rest of the
board (SPEC §7). ``board.changed``/``board.changes`` are :mod:`meshd.domains.board`'s.

* A **project** is a path's git top level (outside git: the folder, or a file's
  folder), or a name given as is (anything that does not start with ``/`` or
  ``~``). ``board.post`` without one posts to the session's repo, else its cwd.
* **Posts** (progress lines, pitfalls) are stored before the reply and read back
  from SQLite for ``board.show``; pruned after ``history_days``.
* **Marks** (``touch --read``, ``watch``) live in :mod:`meshd.core.work.marks` (held
  by :class:`~meshd.core.state.MeshState`, stored, restored); a later
  ``board.changed`` of an overlapping path tells the marking session too.
* ``board.show`` gathers the whole board: the newest posts of each kind, the
  newest changed files, the live sessions working there (cwd or repo at or
  under the project) and the marks at or under it. Nothing private is on the
  board: posts are shared by nature.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from meshd.core.work.marks import Kind
from meshd.core.work.notes import utf8_len
from meshd.domain import Domain
from meshd.domains.board import _path_key, project_name, project_of
from meshd.keys import Key
from meshd.protocol import board as pb
from meshd.protocol.errors import BadKey, InvalidParams, TooLarge
from meshd.service import Conn, rfc3339
from meshd.store.board import changes_page
from meshd.store.shared import Post, posts_page


def _is_path(text: str) -> bool:
    return text[:1] in ("/", "~")


def _keys(paths: list[str]) -> list[Key]:
    out = []
    for i, raw in enumerate(paths):
        try:
            out.append(_path_key(raw))
        except BadKey as exc:
            exc.data["path"] = f"$.paths[{i}]"
            raise
    return out


class BoardWorkHandlers(Domain):
    name = "board.work"

    def install(self) -> None:
        self.svc.add(pb.BOARD_POST, self.post, is_async=True)
        self.svc.add(pb.BOARD_TOUCH, self.touch, is_async=True)
        self.svc.add(pb.BOARD_WATCH, self.watch, is_async=True)
        self.svc.add(pb.BOARD_SHOW, self.show, is_async=True)

    def sweep(self) -> None:
        """Marks of sessions that ended go."""
        st = self.svc.state
        st.marks.sweep(st.live)

    def prune(self, history_days: float) -> None:
        """Board posts older than ``history_days``."""
        st = self.svc.state
        cutoff = st.notes.steady.now() - history_days * 86400  # steps do not age posts
        st.writes.append(("board.post_prune", cutoff))

    async def _project(self, given: str | None, sid: str | None = None) -> str:
        if given is None and sid is not None:
            s = self.svc.state.registry.get(sid)
            given = s.repo or s.cwd
            if not given:
                raise InvalidParams(
                    f"session {sid} reported no repo or cwd: name the project or a path",
                    {"path": "$.project_or_path"},
                )
        if given is None:
            raise InvalidParams("name a project or a path", {"path": "$.project_or_path"})
        if not _is_path(given):
            return project_name(given)
        raw = given
        return await self.svc.resolve_paths(
            [raw], lambda: project_of(_path_key(raw).value, is_dir=raw.endswith("/"))
        )

    # --- methods --------------------------------------------------------------------

    async def post(self, p: pb.BoardPostParams, conn: Conn) -> pb.BoardPostResult:
        st = self.svc.state
        if not st.settings.enabled:
            return pb.BoardPostResult(disabled=True)
        st.registry.get(p.session_id)
        limit = st.settings.max_body_bytes
        if (size := utf8_len(p.text)) > limit:
            raise TooLarge(
                f"the post is {size} bytes; the limit is {limit} (max_body_bytes)",
                {"path": "$.text", "limit": limit},
            )
        project = await self._project(p.project_or_path, p.session_id)
        now = self.svc.clock.now()
        st.writes.append(("board.post", Post(project, p.kind, p.session_id, p.text, now)))
        await self.svc.commit()
        return pb.BoardPostResult(project=project, kind=p.kind, at=rfc3339(now))

    async def touch(self, p: pb.BoardMarkParams, conn: Conn) -> pb.BoardMarkResult:
        if not p.read:
            raise InvalidParams(
                "board.touch records reads (read: true); report changes with board.changed",
                {"path": "$.read"},
            )
        return await self._mark(p, "read")

    async def watch(self, p: pb.BoardMarkParams, conn: Conn) -> pb.BoardMarkResult:
        return await self._mark(p, "watch")

    async def _mark(self, p: pb.BoardMarkParams, kind: Kind) -> pb.BoardMarkResult:
        st = self.svc.state
        if not st.settings.enabled:
            return pb.BoardMarkResult(disabled=True)
        st.registry.get(p.session_id)
        keys = await self.svc.resolve_paths(p.paths, lambda: _keys(p.paths))
        paths = list(dict.fromkeys(k.value for k in keys))
        marks = self.svc.state.marks
        before = dict(marks.by_session.get(p.session_id, {}))
        if p.stop:
            n = marks.untouch(p.session_id, paths, kind)
        else:
            n = marks.touch(p.session_id, paths, kind)
        try:
            await self.svc.commit()
        except BaseException:
            marks.put_back(p.session_id, before)
            raise
        return pb.BoardMarkResult(recorded=n, paths=paths)

    async def show(self, p: pb.BoardShowParams, conn: Conn) -> pb.BoardShowResult:
        project = None if p.project_or_path is None else await self._project(p.project_or_path)
        rows = await self.svc.store.read(lambda db: self._rows(db, project, p.limit))
        out = pb.BoardShowResult(
            project=project,
            progress=[_post(r) for r in rows["progress"]],
            pitfalls=[_post(r) for r in rows["pitfall"]],
            changes=[pb.BoardChange(**{**r, "at": rfc3339(r["at"])}) for r in rows["changes"]],
        )
        if project is not None and _is_path(project):
            out.present = self._present(project)
            out.watching = [
                pb.BoardMark(session_id=sid, path=path, kind=kind, at=rfc3339(at))
                for sid, path, kind, at in self.svc.state.marks.under(project)
                if sid in self.svc.state.registry.sessions
            ]
        return out

    @staticmethod
    def _rows(db: sqlite3.Connection, project: str | None, limit: int) -> dict[str, Any]:
        out: dict[str, Any] = {"progress": [], "pitfall": []}
        if project is not None:
            for kind in ("progress", "pitfall"):
                out[kind] = posts_page(db, project=project, kind=kind, limit=limit)
        out["changes"] = changes_page(db, project=project, since=None, session_id=None, limit=limit)
        return out

    def _present(self, project: str) -> list[pb.BoardPresent]:
        seen: dict[str, pb.BoardPresent] = {}
        for s, how, where in self.svc.state.registry.present_at(project):
            if s.session_id not in seen:
                seen[s.session_id] = pb.BoardPresent(
                    session_id=s.session_id, task=s.task, status=s.status, branch=s.branch,
                    where=f"{how} {where}",
                )  # fmt: skip
        return list(seen.values())


def _post(r: dict[str, Any]) -> pb.BoardPost:
    return pb.BoardPost(session_id=r["session_id"], text=r["text"], at=rfc3339(r["at"]))
