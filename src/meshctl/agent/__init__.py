"""The mesh tools an AI agent uses, defined once for every frontend (Hermes, MCP, …).

A frontend is whatever puts the tools in front of a model: the Hermes plugin
(:mod:`meshctl.hermes`) registers them with Hermes, an MCP server lists them over
MCP, Claude Code hooks call the pre-write check. Each frontend supplies one thing,
a :class:`~meshctl.agent.context.Context` (who is calling and how to reach the
daemon), and takes everything else from here:

- :mod:`.tools` -- the tool table. Each :class:`~.tools.Tool` has a ``name``, a
  ``description``, JSON-schema ``parameters`` and a ``handler(ctx, args) -> str``
  (the JSON text the model reads; never raises). :func:`~.tools.tools_for` returns
  the set for a mode: ``"compact"`` (the default: seven tools, at most 600 tokens
  as a model receives them) or ``"full"`` (the thirteen tools with longer
  descriptions). :func:`~.tools.schema` gives one tool in OpenAI function format
  (``{"name", "description", "parameters"}``), :func:`~.tools.cost` what a set
  costs in tokens (JSON characters / 4, compact separators as sent on the wire),
  :func:`~.tools.run` calls one by name.
- :mod:`.context` -- the :class:`~.context.Context` protocol the handlers use
  (session id, working folder, a fail-open ``call(method, params)``, what arrived
  since the last call) and :class:`~.context.Refused`, what ``call`` raises when
  the daemon answers with an error.
- :mod:`.advice` -- the pre-write check (:func:`~.advice.before_write`: claims and
  recent changes of other sessions on the files about to be written, and the
  warning text: an approval request only when it matters, presence at most one
  informational line per session and turn), the framing sentence for text from
  other sessions (:data:`~.advice.FRAMING`, :data:`~.advice.FRAME`) and the lines
  that hand inbox items to a model (:func:`~.advice.item_line`).

Rules every frontend keeps: text another session wrote reaches the model framed
(:data:`~.advice.FRAMING`); nothing here starts the daemon; a daemon that is down
costs a tool an error result, never an exception.

Standard library only, relative imports only: ``meshctl hermes install`` copies this
package beside the Hermes plugin (Hermes's environment has no session-mesh). The
names documented here are stable.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: a Claude Code hook imports .advice per event
if TYPE_CHECKING:
    from .context import Context, Refused
    from .tools import MODES, Tool, cost, run, schema, tools_for

#: Where each public name lives; loaded on first use, so ``import meshctl.agent.advice``
#: (a hook's warning) loads neither the tool table nor ``typing``.
_NAMES = {"Context": "context", "Refused": "context", "MODES": "tools", "Tool": "tools",
          "cost": "tools", "run": "tools", "schema": "tools", "tools_for": "tools"}  # fmt: skip


def __getattr__(name: str) -> object:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)


__all__ = ["MODES", "Context", "Refused", "Tool", "cost", "run", "schema", "tools_for"]
