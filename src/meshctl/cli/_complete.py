"""Shell completion of live session ids and held keys (click's ``shell_complete``).

Asks the running daemon (never starts one) with a short timeout; any failure
completes nothing rather than printing an error into the user's prompt.
"""

from __future__ import annotations

from typing import Any

import click
from click.shell_completion import CompletionItem

from meshctl._core import env as _env

_TIMEOUT = 1.0


def _ask(ctx: click.Context, method: str, params: dict[str, Any] | None = None) -> Any:
    from meshctl._sync import Mesh
    from meshctl.cli._state import State

    state = ctx.find_object(State)
    profile = state.profile if state else _env.get("MESH_PROFILE", "default")
    socket = state.socket if state else None
    mesh = Mesh(profile, socket, autostart=False, timeout=_TIMEOUT)
    try:
        return mesh.call(method, params)
    finally:
        mesh.close()


def session_ids(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Live session ids starting with what was typed, with their task as help."""
    try:
        listed = _ask(ctx, "session.list")
    except Exception:  # completion must never print a traceback into a prompt
        return []
    return [
        CompletionItem(s["session_id"], help=(s.get("task") or "")[:60])
        for s in listed.get("sessions") or []
        if str(s.get("session_id", "")).startswith(incomplete)
    ]


def held_keys(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The keys the acting session holds (``release``), then paths."""
    from meshctl.cli._state import State

    state = ctx.find_object(State)
    sid = (state.session if state else None) or _env.get("MESH_SESSION")
    items: list[CompletionItem] = []
    if sid:
        try:
            claims = _ask(ctx, "claim.list", {"session_id": sid}).get("claims") or []
        except Exception:  # as above
            claims = []
        items = [
            CompletionItem(c["resource"])
            for c in claims
            if str(c.get("resource", "")).startswith(incomplete)
        ]
    return items or [CompletionItem(incomplete, type="file")]
