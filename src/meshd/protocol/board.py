"""Params and results of ``board.changed`` and ``board.changes`` (SPEC §6, §7, §9).

Paths travel as the user typed them (absolute or ``~``; ``meshctl`` makes
relative ones absolute first) and are canonicalised like ``file:`` claim keys.
The project of a path is the git top level holding it; outside git, the folder
itself, or for a file its folder. Times are RFC 3339 strings in UTC. Names are
prefixed (``Board…``) because ``mesh.schema`` puts every struct in one table.
"""

from __future__ import annotations

from typing import Annotated

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
BOARD_METHODS: list[MethodSpec] = [BOARD_CHANGED, BOARD_CHANGES]
