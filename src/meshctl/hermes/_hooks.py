"""Hermes lifecycle hooks -> mesh calls (kwargs as Hermes 0.19.0 passes them).

Every hook accepts ``**kwargs`` (Hermes always adds ``telemetry_schema_version``
and adds fields over time), does at most a few short calls, and returns at once
when the mesh is unreachable or disabled. None of them ever raises into Hermes.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from . import _text
from ._common import INTERACTIVE, WRITE_TOOLS, in_background_agent
from ._runtime import Runtime

log = logging.getLogger("meshd.hermes")
Hook = Callable[..., Any]


def _safe(fn: Hook) -> Hook:
    """Never let a mesh problem become a Hermes problem; skip Hermes's background agents."""

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        if in_background_agent():
            return None  # a review fork or the curator: not the session's turn
        try:
            return fn(**kwargs)
        except Exception:
            log.debug("meshd hook %s failed", fn.__name__, exc_info=True)
            return None

    return wrapper


def hooks(rt: Runtime) -> dict[str, Hook]:
    """The hook table for one runtime."""

    def on_session_start(
        session_id: str = "", platform: str = "", model: Any = "", **_: Any
    ) -> None:
        rt.track(session_id, platform, str(model or ""))

    def pre_llm_call(
        session_id: str = "",
        platform: str = "",
        model: Any = "",
        user_message: Any = "",
        is_first_turn: bool = False,
        **_: Any,
    ) -> dict[str, str] | None:
        t = rt.track(session_id, platform, str(model or ""))
        if t is None:
            return None
        rt.learn_tools(t)  # once: whether its model can answer (``-t terminal`` cannot)
        task = None  # a group chat's messages are not one person's task; a cron
        if not t.group and t.source != "cron":  # run's prompt is Hermes's, not the job's
            task = _text.one_line(str(user_message or ""))
        rt.report(session_id, status="thinking", task=task or None)
        t.told = False  # a new turn: at most one line on who else works here
        if t.group or not t.registered:
            return None  # multi-party chats get no mesh context (SPEC §6)
        notes = [rt.presence_note(t)] if is_first_turn else []
        text = rt.deliver(t, [n for n in notes if n])
        return {"context": text} if text else None

    def pre_tool_call(
        tool_name: str = "",
        args: Any = None,
        session_id: str = "",
        tool_call_id: str = "",
        **_: Any,
    ) -> None:
        t = rt.track(session_id)
        if t is None:
            return
        rt.report(
            session_id, status="tool-running", tools=[tool_name], activity=f"running {tool_name}"
        )
        if tool_name in WRITE_TOOLS and t.registered and not t.group:
            rt.check_write(t, tool_name, args or {}, tool_call_id)

    def post_tool_call(
        tool_name: str = "", args: Any = None, session_id: str = "", status: str = "", **_: Any
    ) -> None:
        t = rt.sessions.get(session_id)  # registered or not: a write is kept till it is
        if t is not None and status in ("", "ok", "success"):
            rt.after_tool(t, tool_name, args or {})

    def transform_tool_result(
        result: Any = None,
        session_id: str = "",
        tool_call_id: str = "",
        tool_name: str = "",
        **_: Any,
    ) -> str | None:
        t = rt.sessions.get(session_id)
        if t is None or not t.registered or t.group or not isinstance(result, str):
            return None
        note = t.notes.pop(tool_call_id or tool_name, None)
        notes = [note] if note else []
        text = rt.deliver(t, notes)
        return f"{result}\n\n{text}" if text else None

    def post_llm_call(session_id: str = "", platform: str = "", **_: Any) -> None:
        t = rt.sessions.get(session_id)
        if t is not None:
            rt.report(session_id, status=_after_turn(platform or t.platform))

    def on_session_end(session_id: str = "", platform: str = "", **_: Any) -> None:
        if not rt.run_over(session_id):
            post_llm_call(session_id=session_id, platform=platform)

    def on_session_finalize(session_id: str = "", reason: str = "", **_: Any) -> None:
        rt.end(session_id, reason or "ended")

    def on_session_reset(session_id: str = "", platform: str = "", **_: Any) -> None:
        rt.track(session_id, platform)

    def subagent_start(
        parent_session_id: Any = None, child_session_id: Any = None, **_: Any
    ) -> None:
        rt.subagent(parent_session_id, child_session_id)

    def subagent_stop(child_session_id: Any = None, **_: Any) -> None:
        if child_session_id:
            rt.end(str(child_session_id), "subagent finished")

    def pre_gateway_dispatch(
        event: Any = None, gateway: Any = None, session_store: Any = None, **_: Any
    ) -> None:
        rt.gateway_message(event, gateway, session_store)

    table: dict[str, Hook] = {
        "on_session_start": on_session_start,
        "pre_llm_call": pre_llm_call,
        "pre_tool_call": pre_tool_call,
        "post_tool_call": post_tool_call,
        "transform_tool_result": transform_tool_result,
        "post_llm_call": post_llm_call,
        "on_session_end": on_session_end,
        "on_session_finalize": on_session_finalize,
        "on_session_reset": on_session_reset,
        "subagent_start": subagent_start,
        "subagent_stop": subagent_stop,
        "pre_gateway_dispatch": pre_gateway_dispatch,
    }
    return {name: _safe(fn) for name, fn in table.items()}


def _after_turn(platform: str) -> str:
    """Interactive surfaces wait for their user after a turn; others are idle."""
    if platform in INTERACTIVE or (platform and platform not in ("cron", "subagent")):
        return "waiting-for-user"
    return "idle"
