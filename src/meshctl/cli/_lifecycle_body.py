"""The bodies of ``meshctl register``, ``heartbeat`` and ``end``, without click.

The click commands in :mod:`meshctl.cli.lifecycle` parse their options and call
these; the fast path (:mod:`meshctl.cli._fast`) parses the same command lines
without click and calls them too, so both print the same bytes.

Standard library only (a test checks that the hot commands never load click).
"""

from __future__ import annotations

import _socket
import os

from meshctl.cli import _output

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from typing import Any

    from meshctl.cli._state import State

#: What ``--status`` accepts (``register`` and ``heartbeat``).
STATUSES = (
    "idle", "thinking", "tool-running", "blocked", "waiting-for-user", "paused", "done", "errored",
)  # fmt: skip


def disabled_note(result: Any) -> None:
    """Say once on stderr that the mesh is switched off (the command still succeeds)."""
    if isinstance(result, dict) and result.get("disabled"):
        _output.note("the mesh is disabled (enabled = false in config); nothing was recorded")


def register(
    state: State,
    *,
    task: str,
    source: str | None,
    pid: int | None,
    session_id: str | None,
    liveness: str,
    expire_after: float | None,
    parent: str | None,
    slot: str | None,
    queries: bool,
    messages: bool,
    status: str | None,
    replace: bool = False,
) -> None:
    """``meshctl register``: print the new session's id (and only that) on stdout.

    ``--parent`` must name a live session (a prefix is enough): the daemon takes any id
    as a parent, and a typo would make an orphan from the start."""
    if parent:
        from meshctl.cli._ids import check_live

        parent = check_live(state, parent)
    if state.session and session_id is None and pid is None and liveness == "process":
        reused = _reuse(state, task, status)
        if reused is not None:
            _output.emit(state.json, reused, str(reused.get("session_id", "")))
            return
    params = register_params(
        task=task,
        source=source,
        pid=pid,
        session_id=session_id,
        liveness=liveness,
        expire_after=expire_after,
        parent=parent,
        slot=slot,
        queries=queries,
        messages=messages,
        status=status,
        cwd=_cwd(),
        ppid=caller_pid(),
        host=_socket.gethostname(),
    )
    if replace:
        params["replace"] = True
    result = state.call("session.register", params)
    disabled_note(result)
    _output.emit(state.json, result, str(result.get("session_id", "")))


def _reuse(state: State, task: str, status: str | None) -> dict[str, Any] | None:
    """This shell's session, when ``MESH_SESSION`` names a live one registered for the
    very process this register is for (its caller): ``export MESH_SESSION=$(meshctl
    register --task …)`` run again in the same shell then keeps the one session (its
    task and status updated) instead of leaving the first to hold claims beside a
    second. A session of another process (a script that inherited the variable and
    registers for itself) is never reused; nor one given with --id, --pid or as a
    heartbeat session. None: register as usual."""
    from meshd.protocol.errors import SessionExpired, UnknownSession

    sid = state.session
    try:
        info = state.call("session.get", {"session_id": sid})
    except (UnknownSession, SessionExpired):
        return None
    if info.get("liveness") != "process" or info.get("pid") != caller_pid():
        return None
    params: dict[str, Any] = {"session_id": info.get("session_id"), "task": task}
    if status is not None:
        params["status"] = status
    state.call("session.heartbeat", params)
    _output.note(f"this shell's session {info.get('session_id')} is live: reused, task updated")
    return {**info, "task": task, "reused": True}


def register_params(
    *,
    task: str,
    source: str | None,
    pid: int | None,
    session_id: str | None,
    liveness: str,
    expire_after: float | None,
    parent: str | None,
    slot: str | None,
    queries: bool,
    messages: bool,
    status: str | None,
    cwd: str | None,
    ppid: int,
    host: str,
) -> dict[str, Any]:
    """The ``session.register`` params for ``meshctl register``'s options (pure)."""
    if pid is None and liveness == "process":
        pid = ppid  # the caller of meshctl, not meshctl itself (it exits at once)
    params: dict[str, Any] = {"task": task, "liveness": liveness, "host": host}
    from meshctl.cli._git import git_place
    from meshd.protocol.contract import reportable  # a name not in UTF-8, escaped

    place = git_place(cwd) if cwd else None
    optional = {
        "session_id": session_id,
        "source": source,
        "pid": pid,
        "expire_after": expire_after,
        "parent": parent,
        "slot": slot,
        "status": status,
        "cwd": cwd and reportable(cwd),
        "repo": place and place.repo and reportable(place.repo),
        "branch": place and place.branch,
        "worktree": place and place.worktree and reportable(place.worktree),
        "accept_queries": None if queries else False,
        "accept_messages": None if messages else False,
    }
    params.update({k: v for k, v in optional.items() if v is not None})
    return params


_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})


def _proc_identity(pid: int) -> tuple[str, bytes, int] | None:
    """A process's executable, command line and parent (Linux ``/proc``), or None."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
        with open(f"/proc/{pid}/stat", "rb") as f:
            ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        return os.readlink(f"/proc/{pid}/exe"), cmdline, ppid
    except (OSError, ValueError, IndexError):
        return None


def caller_pid() -> int:
    """The process ``meshctl register`` registers for (SPEC §4: its caller).

    Usually the parent. But ``export MESH_SESSION=$(meshctl register … 2>/dev/null)``
    runs meshctl in a subshell that the shell forks for the command substitution (a
    redirection keeps bash from exec'ing meshctl in its place), and that subshell exits
    as soon as the id is read: the session ended at once ("its process died"). A
    parent that is a shell forked from a shell with the same executable and command
    line is such a subshell; the shell it was forked from is the caller. Outside Linux
    (no ``/proc``) the parent it is."""
    ppid = os.getppid()
    me = _proc_identity(ppid)
    while me is not None and os.path.basename(me[0]) in _SHELLS and me[2] > 1:
        up = _proc_identity(me[2])
        if up is None or up[0] != me[0] or up[1] != me[1]:
            break
        ppid, me = me[2], up
    return ppid


def _cwd() -> str | None:
    """The working folder, or None when it was deleted under us."""
    try:
        return os.getcwd()
    except OSError:
        return None


def heartbeat(state: State, *, status: str | None, task: str | None) -> None:
    """``meshctl heartbeat``: "still here", optionally with a new status or task; silent."""
    params: dict[str, Any] = {"session_id": state.require_session()}
    if status is not None:
        params["status"] = status
    if task is not None:
        params["task"] = task
    result = state.call("session.heartbeat", params)
    disabled_note(result)
    _output.emit(state.json, result, None)


def end(state: State, *, handoff: str | None) -> None:
    """``meshctl end``: release the session's claims, optionally leave a handoff."""
    params: dict[str, Any] = {"session_id": state.require_session()}
    if handoff is not None:
        params["handoff"] = handoff
    result = state.call("session.end", params)
    if result.get("disabled"):
        disabled_note(result)
        _output.emit(state.json, result, None)
        return
    _output.emit(state.json, result, lambda: _ended(result))


def _ended(result: dict[str, Any]) -> str:
    released = result.get("released") or []
    if not result.get("ended", True):
        return f"{result.get('session_id')} had already ended; nothing to release."
    text = f"Ended {result.get('session_id')}"
    text += f"; released {len(released)} claim(s): {', '.join(released)}" if released else ""
    if result.get("handoff_id") is not None:
        text += f"; handoff #{result['handoff_id']} saved"
    return text + "."
