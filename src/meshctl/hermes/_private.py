"""Every private Hermes name the plugin reads, each behind a guard, in one place.

Hermes's plugin API gives no way to learn four things the plugin needs, so it reads
private names of Hermes 0.19.0 (:data:`CHECKED_AGAINST`; the test
``tests/hermes/test_private.py`` fails, naming the attribute, when a Hermes release
renames one):

- ``hermes_cli.plugins.get_plugin_manager()._cli_ref`` -- the interactive CLI
  (``HermesCLI``: its ``session_id``), for ``/mesh`` typed in the CLI and for
  registering a CLI at start-up, before its first message;
- ``GatewayRunner._session_key_for_source(source)`` -- a gateway chat's session key,
  for ``/mesh`` typed in a chat;
- ``tools.skill_provenance.get_current_write_origin()`` -- whether this thread runs
  one of Hermes's background agents (a review fork or the curator), not a turn;
- the ``agent`` argument of the function that fires ``pre_llm_call``
  (``agent.turn_context``) and its ``valid_tool_names`` -- whether the session's
  model has the mesh tools (``hermes chat -t terminal`` does not).

Each accessor returns None (or False) when the name is missing, and logs one
warning per process naming it: the plugin then works as before it knew (slash
commands act for the last session seen, a question waits for the status answer),
never fails.
"""

from __future__ import annotations

import logging
import sys
from types import FrameType
from typing import Any

log = logging.getLogger("meshd.hermes")
#: The Hermes release these names were read from.
CHECKED_AGAINST = "0.19.0"
_warned: set[str] = set()


def missing(name: str) -> None:
    """Log once per process that Hermes no longer has ``name``."""
    if name not in _warned:
        _warned.add(name)
        log.warning(
            "meshd plugin: %s not found in this Hermes (checked against Hermes %s); the "
            "plugin carries on without it",
            name,
            CHECKED_AGAINST,
        )


def cli() -> Any:
    """The interactive CLI of this process (``_cli_ref``), or None (gateway, TUI, none)."""
    mod = sys.modules.get("hermes_cli.plugins")
    if mod is None:
        return None
    try:
        manager = mod.get_plugin_manager()
    except Exception:
        return None
    if not hasattr(manager, "_cli_ref"):
        missing("PluginManager._cli_ref")
        return None
    return manager._cli_ref


def cli_session_id() -> str | None:
    """The interactive CLI's current session id, or None."""
    ref = cli()
    sid = getattr(ref, "session_id", None) if ref is not None else None
    return str(sid) if sid else None


def gateway_session_key(gateway: Any, source: Any) -> str | None:
    """A gateway chat's session key (``_session_key_for_source``), or None."""
    method = getattr(gateway, "_session_key_for_source", None)
    if method is None:
        missing("GatewayRunner._session_key_for_source")
        return None
    try:
        key = method(source)
    except Exception:
        return None
    return str(key) if key else None


def write_origin() -> str | None:
    """This thread's Hermes write origin (``background_review`` in a review fork or the
    curator), or None. Never imports anything: no fork, no module."""
    mod = sys.modules.get("tools.skill_provenance")
    if mod is None:
        return None
    getter = getattr(mod, "get_current_write_origin", None)
    if getter is None:
        missing("tools.skill_provenance.get_current_write_origin")
        return None
    try:
        return str(getter())
    except Exception:
        return None


def agent_tool_names(depth: int = 12) -> frozenset[str] | None:
    """From inside a ``pre_llm_call`` hook: the tools the calling agent's model has
    (``agent.valid_tool_names`` of the ``agent`` argument of the function that fired
    the hook), or None when no such frame is found."""
    frame: FrameType | None
    try:
        frame = sys._getframe(1)
    except ValueError:
        return None
    for _ in range(depth):
        if frame is None:
            break
        agent = frame.f_locals.get("agent")
        names = getattr(agent, "valid_tool_names", None)
        if isinstance(names, set | frozenset):
            return frozenset(str(n) for n in names)
        frame = frame.f_back
    missing("the calling agent's valid_tool_names (pre_llm_call)")
    return None
