"""``board.changed`` and ``board.changes``: changed-file notices (SPEC §6, §7).

The rules (coalescing, who is told when) live in :mod:`meshd.core.work.board`; this
module does what reads the filesystem and what waits:

* Paths are canonicalised like ``file:`` claim keys (``~`` expanded, symlinks
  resolved); any other key kind is refused with ``BAD_KEY``.
* The project of a path is found by walking up from it to the nearest folder
  holding a ``.git`` entry (file or folder: worktrees and submodules have a
  ``.git`` file); outside git it is the path itself when it is a folder, else
  the folder the file is (or would be) in. One report may span projects: each
  project is coalesced and told on its own.
* Recipients: every other live session, not the writer and not its ancestors or
  descendants, that holds a claim overlapping a changed path
  (``ClaimTable.check``), whose cwd or repo contains or lies under one
  (``Registry.present_at``; not when that place is ``/``, the home folder or above
  it: :func:`meshd.keys.broad_place`), or that watches or recently read an overlapping
  path (``board touch --read``, ``board watch``: :mod:`meshd.core.work.marks`).
  Notices go as events of kind ``file.changed`` to the recipients' subscribed
  connections; a recipient without one finds a durable notice in its inbox.
* Each path is stored as a row before the reply (``("board.changed", …)``);
  the pending totals of quiet periods are flushed by the service's sweeper,
  which calls :meth:`BoardHandlers.sweep` every tick. Rows older than
  ``history_days`` are pruned hourly (:meth:`BoardHandlers.prune`). The board's
  writes and events leave through :meth:`BoardHandlers.drain`, the domain's outbox.
"""

from __future__ import annotations

import os
from datetime import datetime

from meshd.core.state import Event
from meshd.core.work.board import BoardState, FileNotice
from meshd.domain import Domain
from meshd.keys import Key, broad_place, canonical_key
from meshd.protocol import board as pb
from meshd.protocol.contract import rfc3339
from meshd.protocol.errors import BadKey, InvalidParams
from meshd.service import Conn
from meshd.slices import Slices
from meshd.store.board import changes_page

HOME = os.path.expanduser("~")
#: The homes whose places (``/``, the home, a folder above it) tell nothing of a
#: session's work: :func:`meshd.keys.broad_place`, the rule ``--broad`` claims follow.
#: A cwd is reported as the session saw it, so the home as written counts beside the
#: home as resolved when the daemon started.
_HOMES = frozenset({HOME.rstrip("/") or "/", os.path.realpath(HOME)})


def project_of(
    path: str, cache: dict[str, str | None] | None = None, *, is_dir: bool = False
) -> str:
    """The git top level holding ``path``; outside git the folder itself, or the file's folder.

    Reads the filesystem (``.git`` entries, is-a-folder). ``cache`` maps folders
    already walked to the git top level above them, or None for no git above, for
    reports of many files: it never holds a folder's own project outside git, which
    is not the project of the folders under it. ``is_dir``: the path was given ending
    in ``/``, so it is a folder even before it exists (SPEC §7; the key itself is kept
    without the slash).
    """
    start = path if is_dir or os.path.isdir(path) else (os.path.dirname(path) or "/")
    seen: list[str] = []
    folder = start
    top: str | None = None
    while True:
        if cache is not None and folder in cache:
            top = cache[folder]
            break
        seen.append(folder)
        if os.path.lexists(os.path.join(folder, ".git")):
            top = folder
            break
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    if cache is not None:
        for f in seen:
            cache[f] = top
    return start if top is None else top


def _by_project(paths: list[str]) -> dict[str, dict[str, Key]]:
    """The canonical keys of ``paths`` by project (reads the filesystem: run it in the
    resolver, off the event loop)."""
    by_project: dict[str, dict[str, Key]] = {}
    cache: dict[str, str | None] = {}
    for i, raw in enumerate(paths):
        try:
            key = _path_key(raw)
        except BadKey as exc:
            exc.data["path"] = f"$.paths[{i}]"
            raise
        project = project_of(key.value, cache, is_dir=raw.endswith("/"))
        by_project.setdefault(project, {})[key.value] = key
    return by_project


def project_name(name: str) -> str:
    """A project given by name, as is; refused when it looks like a path but is not one
    (``..``, ``../../etc``, ``src/``, ``.hidden``): the CLI reads such a word as a path,
    and a name must never be mistaken for one by anything that reads the board."""
    if name[:1] == "." or "/" in name or "\\" in name or "\0" in name:
        raise InvalidParams(
            f"project name {name!r} looks like a path but is not one: give a folder as "
            "an absolute path (or ~/…), or a name with no '/' that does not start with '.'",
            {"path": "$.project_or_path"},
        )
    return name


def _path_key(raw: str) -> Key:
    key = canonical_key(raw, home=HOME, broad=True)
    if key.kind != "file":
        raise BadKey(
            f"bad path {raw!r}: board.changed takes file paths (absolute or ~), "
            f"not {key.kind}: keys",
            {"key": raw},
        )
    return key


class BoardHandlers(Domain):
    name = "board"

    @property
    def board(self) -> BoardState:
        """The board's changed files (held by :class:`~meshd.core.state.MeshState`)."""
        return self.svc.state.board

    def install(self) -> None:
        self.svc.add(pb.BOARD_CHANGED, self.changed, is_async=True)
        self.svc.add(pb.BOARD_CHANGES, self.changes, is_async=True)

    # --- domain hooks ---------------------------------------------------------------

    def sweep(self) -> None:
        """Flush pending totals whose quiet period ended (to recipients still live)."""
        reg = self.svc.state.registry
        self._publish(self.board.sweep(lambda sid: sid in reg.sessions))

    def prune(self, history_days: float) -> None:
        self.board.prune(history_days)

    # --- plumbing -------------------------------------------------------------------

    def _publish(self, notices: list[FileNotice]) -> None:
        """One ``file.changed`` event per subscribed recipient of each notice; a recipient
        with no subscriber finds it in its inbox instead (SPEC §6: events without a
        subscriber wait in the inbox), as a durable ``notice``."""
        st = self.svc.state
        for n in notices:
            for r in n.recipients:
                if st.mailbox.has_subscriber(r):
                    st.events.append(Event(r, n.event(r, rfc3339(n.at))))
                elif r in st.registry.sessions:
                    st.mailbox.notice(r, n.text)

    async def _recipients(self, writer: str, keys: list[Key], slices: Slices) -> list[str]:
        st = self.svc.state
        out: dict[str, None] = {}
        for c in st.claims.check(keys, writer):  # unrelated holders only
            out[c.session_id] = None
        for key in keys:
            await slices.tick()
            for s, how, where in st.registry.present_at(key.value):
                if how != "changed" and broad_place(where, _HOMES):
                    continue
                if s.session_id not in out and not st.claims.related(writer, s.session_id):
                    out[s.session_id] = None
        marks = self.svc.state.marks  # watches and fresh reads (board touch/watch)
        for sid in marks.overlapping(k.value for k in keys):
            live = sid in st.registry.sessions
            if live and sid != writer and sid not in out and not st.claims.related(writer, sid):
                out[sid] = None
        return list(out)

    # --- methods --------------------------------------------------------------------

    async def changed(self, p: pb.BoardChangedParams, conn: Conn) -> pb.BoardChangedResult:
        svc, st = self.svc, self.svc.state
        if not st.settings.enabled:
            return pb.BoardChangedResult(recorded=0, project="", disabled=True)
        st.registry.get(p.session_id)
        by_project = await svc.resolve_paths(p.paths, lambda: _by_project(p.paths))
        st.registry.get(p.session_id)  # it may have ended while the paths were resolved
        notified: dict[str, None] = {}
        held: dict[str, None] = {}
        recorded = 0
        slices = Slices()  # 1,000 paths in as many projects: not in one turn of the loop
        projects: list[str] = []
        for project, keys in by_project.items():
            await slices.tick()
            whom = await self._recipients(p.session_id, list(keys.values()), slices)
            if p.session_id not in st.registry.sessions:
                break  # it ended meanwhile: what it reported before stands, nothing after
            projects.append(project)
            out = self.board.report(p.session_id, project, list(keys), p.summary, whom)
            st.registry.changed(p.session_id, keys)
            recorded += len(out.changes)
            if out.notice is not None:
                self._publish([out.notice])
                notified.update(dict.fromkeys(out.notice.recipients))
            held.update(dict.fromkeys(out.held))
        # If this cannot be stored, nothing is acknowledged and nothing published; the
        # quiet periods it opened stay, so a later notice is only late, never doubled.
        await svc.commit()
        if not projects:
            st.registry.get(p.session_id)  # says why: it ended before anything was recorded
        return pb.BoardChangedResult(
            recorded=recorded, project=projects[0], notified=list(notified),
            held=[h for h in held if h not in notified], projects=projects,
        )  # fmt: skip

    async def changes(self, p: pb.BoardChangesParams, conn: Conn) -> pb.BoardChangesResult:
        since = None
        if p.since is not None:
            try:
                since = datetime.fromisoformat(p.since.replace("Z", "+00:00")).timestamp()
            except (ValueError, OverflowError, OSError) as exc:
                raise InvalidParams(
                    f"since must be an RFC 3339 time, got {p.since!r}", {"path": "$.since"}
                ) from exc
        project = p.project_or_path
        if project is not None and project[:1] in ("/", "~"):
            raw = project
            project = await self.svc.resolve_paths(
                [raw], lambda: project_of(_path_key(raw).value, is_dir=raw.endswith("/"))
            )
        elif project is not None:
            project = project_name(project)
        rows = await self.svc.store.read(
            lambda db: changes_page(
                db, project=project, since=since, session_id=p.session_id, limit=p.limit
            )
        )
        return pb.BoardChangesResult(
            project=project,
            entries=[pb.BoardChange(**{**r, "at": rfc3339(r["at"])}) for r in rows],
        )
