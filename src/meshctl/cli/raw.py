"""``meshctl call METHOD [PARAMS_JSON | -]``: one raw JSON-RPC request.

The escape hatch that makes the CLI a complete protocol client (as watchman's
``-j``): the params are a JSON object or array, given as an argument, or read
from stdin with ``-``; the result is printed as JSON whether or not ``--json``
was given, since there is no human form to choose. Params that are not valid
JSON, or not an object or array (JSON-RPC allows no other), are a usage error
(exit 2) that says where the JSON broke; errors from the daemon exit as any
other command's do.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from meshctl.cli import _output
from meshctl.cli._context import common_options, get_state


def parse_params(text: str, source: str) -> dict[str, Any] | list[Any]:
    """Decode ``text`` as JSON-RPC params, or raise a usage error naming ``source``."""
    try:
        params = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.UsageError(
            f"{source} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}; "
            'give an object such as \'{"session_id": "cli:1"}\''
        ) from exc
    if not isinstance(params, dict | list):
        raise click.UsageError(
            f"{source} must be a JSON object or array (JSON-RPC params), "
            f"not {type(params).__name__}"
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
    result = state.call(method, params)
    _output.write_json(result)
