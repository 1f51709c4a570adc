"""``meshctl board changed|changes`` (SPEC §7, §9): changed files on the board.

Decisions:

- ``changed PATH…`` acts for a session (``--session``/``MESH_SESSION``) and
  needs one. Relative paths are made absolute against this command's cwd; ``~``
  and absolute paths are sent as typed (the daemon canonicalises them).
- The other sessions that overlap the paths are told at once, or -- when this
  session already told them about its changes in the same project within the
  last 30 s -- with the total when that quiet period ends; the output says which.
- ``changes [PATH]`` lists the project's recent changed files (PATH defaults to
  the cwd; its project is the git top level holding it); ``--all`` lists every
  project's. It needs no session.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import click

from meshctl.cli import _output
from meshctl.cli._context import common_options, get_state


def absolute(path: str, cwd: str | None = None) -> str:
    """``path`` made absolute against ``cwd`` (default: ours); ``~`` and ``/`` paths as typed."""
    if path.startswith(("/", "~")):
        return path
    try:
        base = cwd if cwd is not None else os.getcwd()
    except OSError:
        return path  # a deleted cwd: the daemon names the path in its BAD_KEY
    return os.path.join(base, path)


# --- rendering (pure) -------------------------------------------------------------------


def render_changed(result: Mapping[str, Any]) -> str:
    n = int(result.get("recorded") or 0)
    projects = [str(p) for p in result.get("projects") or [result.get("project") or "?"]]
    where = ", ".join(_output.tilde(p) or p for p in projects)
    lines = [f"Recorded {n} changed file{'' if n == 1 else 's'} in {where}."]
    if told := result.get("notified"):
        lines.append("Told now: " + ", ".join(told) + ".")
    if held := result.get("held"):
        lines.append("Told within 30 s, with your other recent changes: " + ", ".join(held) + ".")
    if not result.get("notified") and not result.get("held"):
        lines.append("No other live session works on these paths.")
    return "\n".join(lines)


def render_changes(result: Mapping[str, Any]) -> str:
    entries: Sequence[Mapping[str, Any]] = result.get("entries") or []
    project = result.get("project")
    if not entries:
        return f"No changed files on the board of {project}." if project else "No changed files."
    head = f"Changed files in {_output.tilde(project)}:" if project else "Changed files:"
    lines = [head]
    for e in entries:
        path = str(e.get("path", ""))
        shown = path[len(project) + 1 :] if project and path.startswith(project + "/") else path
        summary = f" — {e['summary']}" if e.get("summary") else ""
        lines.append(f"- {e.get('at')} {e.get('session_id')}: {shown}{summary}")
    return "\n".join(lines)


# --- commands ---------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@common_options
def board() -> None:
    """The project board: changed files (who changed what, when, why)."""


@board.command()
@common_options
@click.argument("paths", metavar="PATH…", nargs=-1, required=True)
@click.option("--summary", metavar="T", default="", help="What the change was (≤ 200 chars).")
def changed(paths: tuple[str, ...], summary: str) -> None:
    """Report files you changed; other live sessions that claim or work on them are told.

    Notices are coalesced: one per writer and project per 30 s, with the total.
    """
    state = get_state()
    params: dict[str, Any] = {
        "session_id": state.require_session(),
        "paths": [absolute(p) for p in paths],
    }
    if summary:
        params["summary"] = summary
    result = state.call("board.changed", params)
    _output.emit(state.json, result, lambda: render_changed(_output.clean(result)))


@board.command()
@common_options
@click.argument("path", metavar="[PATH]", required=False)
@click.option("--all", "every", is_flag=True, help="Every project's changed files.")
@click.option("--since", metavar="T", help="Only changes at or after T (RFC 3339).")
@click.option(
    "--limit", type=click.IntRange(1, 10_000), default=100, show_default=True, metavar="N"
)
def changes(path: str | None, every: bool, since: str | None, limit: int) -> None:
    """Recent changed files of PATH's project (default: the cwd's), newest last."""
    state = get_state()
    params: dict[str, Any] = {"limit": limit}
    if not every:
        params["project_or_path"] = absolute(path or ".")
    if since:
        params["since"] = since
    result = state.call("board.changes", params)
    _output.emit(state.json, result, lambda: render_changes(_output.clean(result)))
