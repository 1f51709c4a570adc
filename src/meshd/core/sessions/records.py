"""A session's records: what the registry holds and what callers may set (SPEC §4).

Split from :mod:`meshd.core.sessions.registry` (the table of live sessions) by object:
:class:`Session` (one registered session, also the stored row), :class:`Registration`
(``session.register``'s params plus what only the daemon knows), :class:`Report` (what a
heartbeat may change) and the limits every reported field is checked against.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Literal

import msgspec

from meshd.protocol.contract import REPORTED_PATHS
from meshd.protocol.errors import InvalidParams, TooLarge
from meshd.protocol.methods import Liveness, Status

EndReason = Literal["ended", "expired", "died", "unbound", "replaced"]

MAX_TASK = 200
MAX_TOOLS = 10
MAX_TOOL_NAME = 64
MAX_SHORT = 128
MAX_PATH = 4096
MAX_SOURCE = 64
_SOURCE_RE = re.compile(r"[A-Za-z0-9_.:@/-]+")


class Session(msgspec.Struct, kw_only=True, gc=False, omit_defaults=True):
    """One registered session. ``*_mono`` fields are on the daemon's monotonic clock.

    Stored whole (:mod:`meshd.store.sessions`) without the fields that hold their
    default: 380 bytes a row instead of 700 for a typical session, so a restart
    reads, checks and decodes half as much (bench: daemon start). A default is
    therefore part of the stored format -- a record written without ``bind`` reads
    back with today's default -- so never change one (add a new field instead);
    ``tests/core/test_registry.py`` pins them.

    Laid out for 10,000 of them: ``gc=False`` and tuples, not lists, for ``tools`` and
    ``anchors`` (a tuple of strings or ints leaves the collector's sight), so a live
    session adds nothing to a full GC pause; the values many sessions share (source,
    model, places, ...) are interned by :func:`compact` (bench: memory per session).
    """

    session_id: str
    profile: str
    source: str
    task: str = ""
    status: Status = "idle"
    model: str = ""
    provider: str = ""
    pid: int | None = None
    pid_start: int | None = None
    host: str = ""
    cwd: str | None = None
    repo: str | None = None
    branch: str | None = None
    worktree: str | None = None
    tools: tuple[str, ...] = ()
    parent: str | None = None
    slot: str | None = None
    kanban_task: str | None = None
    accept_queries: bool = True
    accept_messages: bool = True
    liveness: Liveness = "heartbeat"
    expire_after: float | None = None
    bind: bool = False
    started_at: float = 0.0
    last_heartbeat: float = 0.0
    last_activity: float = 0.0
    last_hb_mono: float = 0.0
    grace_until: float = 0.0
    unbound_at: float | None = None
    conn_id: int | None = None
    anchors: tuple[tuple[int, int | None], ...] = ()
    rank: int = 0  # set by a person only (SPEC §5b): waiters are served highest first
    rank_by: str | None = None
    rank_at: float | None = None
    activity: str = ""
    reg: str = ""  # this registration (SPEC §4): a private note is its, not its id's

    def pids(self) -> list[tuple[int, int | None]]:
        """Every (pid, start time) this session lives with."""
        main = [] if self.pid is None else [(self.pid, self.pid_start)]
        return [*main, *self.anchors]


SHARED = ("source", "model", "provider", "host", "cwd", "repo", "branch", "worktree")
"""Fields many sessions have in common: one string object each, not one per session
(:func:`compact`; a heartbeat's report is interned by the registry the same way)."""


def interned(v: str | None) -> str | None:
    return v if v is None else sys.intern(v)


def compact(s: Session) -> Session:
    """Intern ``s``'s shared strings and make its lists tuples (see :class:`Session`);
    the values are unchanged. (``status`` and ``liveness`` are msgspec's own literals.)"""
    intern = sys.intern
    s.profile, s.source, s.host = intern(s.profile), intern(s.source), intern(s.host)
    s.model, s.provider = intern(s.model), intern(s.provider)
    if s.cwd is not None:
        s.cwd = intern(s.cwd)
    if s.repo is not None:
        s.repo = intern(s.repo)
    if s.branch is not None:
        s.branch = intern(s.branch)
    if s.worktree is not None:
        s.worktree = intern(s.worktree)
    if s.tools:
        s.tools = tuple(map(intern, s.tools))
    return s


class Registration(msgspec.Struct, kw_only=True):
    """What a caller asks to register: ``session.register``'s params (same field names,
    so the handler passes them through), plus ``pid_start`` and ``conn_id`` that only
    the daemon knows; ``host`` defaults to the daemon's."""

    session_id: str | None
    source: str
    task: str
    status: Status
    model: str
    provider: str
    pid: int | None
    pid_start: int | None
    host: str
    cwd: str | None
    repo: str | None
    branch: str | None
    worktree: str | None
    tools: list[str]
    parent: str | None
    slot: str | None
    kanban_task: str | None
    accept_queries: bool | None
    accept_messages: bool | None
    liveness: Liveness
    expire_after: float | None
    bind: bool
    conn_id: int | None
    replace: bool = False


class Report(msgspec.Struct, kw_only=True):
    """Fields a heartbeat may change (``contract.REPORTED``, in its order: a test keeps
    them equal); ``None`` means unchanged."""

    status: Status | None = None
    task: str | None = None
    cwd: str | None = None
    repo: str | None = None
    branch: str | None = None
    worktree: str | None = None
    tools: list[str] | None = None
    activity: str | None = None


def _check_len(name: str, value: str | None, limit: int) -> None:
    if value is not None and len(value) > limit:
        raise TooLarge(
            f"{name} is {len(value)} characters; the limit is {limit}",
            {"path": f"$.{name}", "limit": limit},
        )


def _check_path(name: str, value: str | None) -> None:
    _check_len(name, value, MAX_PATH)
    if value is not None and not os.path.isabs(value):
        raise InvalidParams(
            f"{name} must be an absolute path, got {value!r}", {"path": f"$.{name}"}
        )


def validate_report(r: Registration | Report) -> None:
    """Refuse over-long or malformed reported fields (SPEC §4)."""
    _check_len("task", r.task, MAX_TASK)
    _check_len("branch", r.branch, MAX_PATH)
    for name in REPORTED_PATHS:
        _check_path(name, getattr(r, name))
    if r.tools is not None:
        if len(r.tools) > MAX_TOOLS:
            raise TooLarge(
                f"tools lists {len(r.tools)} names; the limit is {MAX_TOOLS}",
                {"path": "$.tools", "limit": MAX_TOOLS},
            )
        for i, tool in enumerate(r.tools):
            _check_len(f"tools[{i}]", tool, MAX_TOOL_NAME)
    if isinstance(r, Report):
        _check_len("activity", r.activity, MAX_TASK)


def validate_registration(r: Registration) -> None:
    validate_report(r)
    for name in ("model", "provider", "slot", "kanban_task", "host"):
        _check_len(name, getattr(r, name), MAX_SHORT)
    _check_len("parent", r.parent, MAX_SHORT)
    _check_len("source", r.source, MAX_SOURCE)  # over-long is TOO_LARGE, as every field
    if not _SOURCE_RE.fullmatch(r.source):
        raise InvalidParams(
            f"source {r.source!r} must be 1-64 characters of letters, digits and _.:@/-",
            {"path": "$.source"},
        )
    if r.liveness == "process" and r.pid is None:
        raise InvalidParams("liveness 'process' needs a pid", {"path": "$.pid"})
    if r.pid is not None and r.pid <= 0:
        raise InvalidParams(f"pid must be positive, got {r.pid}", {"path": "$.pid"})
