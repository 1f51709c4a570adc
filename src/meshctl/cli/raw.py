"""``meshctl call METHOD [PARAMS_JSON | -]``: one raw JSON-RPC request.

The escape hatch that makes the CLI a complete protocol client (as watchman's
``-j``): the params are a JSON object or array, given as an argument, or read
from stdin with ``-``; the result is printed as JSON whether or not ``--json``
was given, since there is no human form to choose. Params that are not valid
JSON, or not an object or array (JSON-RPC allows no other), are a usage error
(exit 2) that says where the JSON broke; errors from the daemon exit as any
other command's do. A method that may wait (``claim.acquire`` with ``wait``,
``signal.wait``, ``query.ask`` …) is given that long plus the usual reply time, as
the commands that wrap it do: a raw call must not give up on a daemon that is
rightly waiting.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from meshctl.cli import _output
from meshctl.cli._context import common_options, get_state
from meshctl.cli._params import json_text
from meshd.protocol.errors import NoSession

#: Methods that may wait before replying: the param that says how long, and its
#: default when not given (the protocol's; ``session.resume`` waits the daemon's
#: ``max_query_timeout``, read from mesh.info, 60 s by default).
WAITS: dict[str, tuple[str, float]] = {
    "claim.acquire": ("wait", 0.0),
    "session.resume": ("wait", 60.0),
    "query.ask": ("timeout", 10.0),
    "broadcast.send": ("timeout", 10.0),
    "handoff.request": ("timeout", 10.0),
    "job.wait": ("timeout", 60.0),
    "signal.wait": ("timeout", 10.0),
}


#: JSON's names for what json.loads returns (the user wrote JSON, not Python).
_JSON_NAMES = {type(None): "null", bool: "a boolean", int: "a number", float: "a number",
               str: "a string"}  # fmt: skip


def may_wait(method: str, params: Any) -> float:
    """How long ``method`` with ``params`` may wait before it replies (0: it does not)."""
    name, default = WAITS.get(method, ("", 0.0))
    value = params.get(name, default) if isinstance(params, dict) else default
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return max(float(value), 0.0)


def parse_params(text: str, source: str) -> dict[str, Any] | list[Any]:
    """Decode ``text`` as JSON-RPC params, or raise a usage error naming ``source``."""
    try:
        params = json_text(text)
    except json.JSONDecodeError as exc:
        raise click.UsageError(
            f"{source} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}; "
            'give an object such as \'{"session_id": "cli:1"}\''
        ) from exc
    except ValueError as exc:  # NaN, Infinity: Python's json takes them, JSON does not
        raise click.UsageError(f"{source} is not valid JSON: {exc}") from exc
    if not isinstance(params, dict | list):  # what JSON calls it, not Python's type name
        raise click.UsageError(
            f"{source} must be a JSON object or array (JSON-RPC params), "
            f"not {_JSON_NAMES.get(type(params), type(params).__name__)}"
        )
    return params


@click.command()
@common_options
@click.argument("method")
@click.argument("params_json", metavar="[PARAMS_JSON | -]", required=False)
def call(method: str, params_json: str | None) -> None:
    """Send one JSON-RPC request and print its result as JSON.

    \b
    Examples:
      meshctl call mesh.info
      meshctl call session.get '{"session_id": "cli:20261129-1f3a9c"}'
      echo '{"fresh": true}' | meshctl call session.list -
    """
    if params_json == "-":
        params: Any = parse_params(sys.stdin.read(), "stdin")
    elif params_json is not None:
        params = parse_params(params_json, "PARAMS_JSON")
    else:
        params = None
    state = get_state()
    waits = may_wait(method, params)
    if method == "session.resume" and not (isinstance(params, dict) and "wait" in params):
        waits = state.mesh().query_cap()  # no wait given: the daemon waits its own cap
    try:
        result = state.call(method, params, timeout=state.mesh().timeout + waits if waits else None)
    except NoSession as exc:  # raw: --session/MESH_SESSION are not put into PARAMS_JSON
        raise _output.Failure(
            str(exc), "NO_SESSION", code=exc.code, data=dict(exc.data),
            hint='put "session_id" in PARAMS_JSON (a raw call sends only what it is given)',
        ) from exc  # fmt: skip
    _output.write_json(result)
