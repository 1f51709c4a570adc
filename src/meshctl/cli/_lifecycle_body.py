"""The body of ``meshctl heartbeat``, without click (the per-turn command).

The click command in :mod:`meshctl.cli.lifecycle` parses its options and calls
:func:`heartbeat`; the fast path (:mod:`meshctl.cli._fast`) parses the same command
lines without click and calls it too, so both print the same bytes.

Standard library only (a test checks that the hot commands never load click).
"""

from __future__ import annotations

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
