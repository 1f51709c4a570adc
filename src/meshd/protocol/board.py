"""Params and results of ``board.changed`` and ``board.changes`` (SPEC §6, §7, §9).

Paths travel as the user typed them (absolute or ``~``; ``meshctl`` makes
relative ones absolute first) and are canonicalised like ``file:`` claim keys.
The project of a path is the git top level holding it; outside git, the folder
itself, or for a file its folder. Times are RFC 3339 strings in UTC. Names are
prefixed (``Board…``) because ``mesh.schema`` puts every struct in one table.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from meshd.protocol.methods import MethodSpec, Params, Result, SessionId

BoardPath = Annotated[str, Meta(min_length=1, max_length=4096)]
BoardPaths = Annotated[list[BoardPath], Meta(min_length=1, max_length=1000)]
BoardSummary = Annotated[str, Meta(max_length=200)]


class BoardChangedParams(Params):
    """Report files this session changed; overlapping live sessions are told (coalesced)."""

    session_id: SessionId
    paths: BoardPaths
    summary: BoardSummary = ""


class BoardChangedResult(Result):
    """``notified``: told now. ``held``: told when this writer's quiet period in the
    project ends (one notice per writer and project per 30 s, with the total)."""

    recorded: int
    project: str
    notified: list[str] = []
    held: list[str] = []
    projects: list[str] = []
    disabled: bool = False


class BoardChangesParams(Params):
    """Recent changed files, newest last. ``project_or_path``: a path (its project's
    changes) or a project as stored; none: every project. ``since``: RFC 3339."""

    project_or_path: BoardPath | None = None
    since: str | None = None
    session_id: SessionId | None = None
    limit: Annotated[int, Meta(ge=1, le=10_000)] = 100


class BoardChange(Result):
    path: str
    project: str
    session_id: str
    at: str
    summary: str = ""


class BoardChangesResult(Result):
    project: str | None = None
    entries: list[BoardChange] = []


BOARD_CHANGED = MethodSpec(
    "board.changed", BoardChangedParams, BoardChangedResult, "Report changed files."
)
BOARD_CHANGES = MethodSpec(
    "board.changes", BoardChangesParams, BoardChangesResult, "Recent changed files."
)


# --- the rest of the board: posts, reads, watches, the whole view --------------------

PostKind = Literal["progress", "pitfall"]


class BoardPostParams(Params):
    """Post a progress line or a pitfall on a project's board. ``project_or_path``: a
    path (its project: the git top level, or the folder) or a project name; none: the
    session's repo, else its cwd."""

    session_id: SessionId
    kind: PostKind
    text: Annotated[str, Meta(min_length=1)]
    project_or_path: BoardPath | None = None


class BoardPostResult(Result):
    project: str = ""
    kind: str = ""
    at: str = ""
    disabled: bool = False


class BoardMarkParams(Params):
    """``board.touch``: this session read PATHS (``read`` must be true). ``board.watch``:
    it watches PATHS (``stop``: no longer). Either way a later change of an overlapping
    path is told to it (reads for 12 hours, watches while the session lives)."""

    session_id: SessionId
    paths: BoardPaths
    read: bool = True
    stop: bool = False


class BoardMarkResult(Result):
    recorded: int = 0
    paths: list[str] = []
    disabled: bool = False


class BoardShowParams(Params):
    """The whole board of a project (a path or a name; none: every project's changes
    only): progress, pitfalls, changed files, who is present, who watches."""

    project_or_path: BoardPath | None = None
    limit: Annotated[int, Meta(ge=1, le=1000)] = 20


class BoardPost(Result):
    session_id: str
    text: str
    at: str


class BoardPresent(Result):
    session_id: str
    task: str = ""
    status: str = ""
    branch: str | None = None
    where: str = ""


class BoardMark(Result):
    session_id: str
    path: str
    kind: str
    at: str


class BoardShowResult(Result):
    project: str | None = None
    progress: list[BoardPost] = []
    pitfalls: list[BoardPost] = []
    changes: list[BoardChange] = []
    present: list[BoardPresent] = []
    watching: list[BoardMark] = []


BOARD_POST = MethodSpec(
    "board.post", BoardPostParams, BoardPostResult, "Post progress or a pitfall."
)
BOARD_TOUCH = MethodSpec("board.touch", BoardMarkParams, BoardMarkResult, "Record files read.")
BOARD_WATCH = MethodSpec("board.watch", BoardMarkParams, BoardMarkResult, "Watch paths.")
BOARD_SHOW = MethodSpec("board.show", BoardShowParams, BoardShowResult, "The whole board.")
