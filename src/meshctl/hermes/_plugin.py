"""``register(ctx)``'s work: one runtime per Hermes process, its hooks, tools and command."""

from __future__ import annotations

import logging
from typing import Any

from . import _command, _hooks
from ._agent import tools as agent_tools
from ._runtime import Runtime
from ._tools import Tools, tool_mode

log = logging.getLogger("meshd.hermes")
TOOLSET = "mesh"
_RUNTIMES: dict[str, Runtime] = {}


def runtime(hermes_profile: str) -> Runtime:
    """This process's runtime (Hermes may discover plugins more than once)."""
    if "rt" not in _RUNTIMES:
        _RUNTIMES["rt"] = Runtime(hermes_profile)
    return _RUNTIMES["rt"]


def setup(ctx: Any) -> None:
    rt = runtime(str(getattr(ctx, "profile_name", "") or "default"))
    rt.mode = tool_mode()
    tools = Tools(rt, rt.mode)
    for name, callback in _hooks.hooks(rt).items():
        ctx.register_hook(name, callback)
    ctx.register_hook("pre_llm_call", _refresh(tools))
    reachable = rt.link.available()
    for tool in tools.registered():
        method = tool.method
        if method is not None and reachable and not rt.link.has_method(method):
            continue  # this daemon does not serve it: the model never sees it
        ctx.register_tool(
            name=tool.name,
            toolset=TOOLSET,
            schema=agent_tools.schema(tool),
            handler=tools.handler(tool.name),
            check_fn=_check(rt, method),
            description=tool.description,
            emoji="🕸",
        )
    ctx.register_command(
        "mesh",
        _command.handler(tools),
        description="Session Mesh: your other live sessions, questions, claims, inbox",
        args_hint="sessions|ask ID Q|sync|inbox|claim RES|release|broadcast TEXT|handoff TEXT",
    )
    rt.register_cli_at_start()
    log.debug("meshd plugin registered (profile %s, socket %s)", rt.profile, rt.socket)


def _check(rt: Runtime, method: str | None) -> Any:
    """check_fn: the tool shows only while the daemon answers (and serves ``method``)."""

    def check() -> bool:
        if not rt.link.available():
            return False
        return method is None or rt.link.has_method(method)

    return check


def _refresh(tools: Tools) -> Any:
    def refresh_claims(session_id: str = "", **_: Any) -> None:
        try:
            if session_id and not tools.rt.link.down:
                tools.refresh_claims(session_id)
        except Exception:
            log.debug("meshd: claim refresh failed", exc_info=True)

    return refresh_claims
