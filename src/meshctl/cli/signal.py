"""``meshctl signal emit NAME [PAYLOAD | --payload JSON]`` | ``signal wait NAME [--after SEQ |
--since D] [--timeout S]`` (SPEC §7, §9).

Decisions:

- Both register a short-lived session of their own (a child of ``--session``),
  as SPEC §9 asks: the daemon records the emit as the parent's (``emitted_by``; as
  that session's only when no ``--session`` is given), and the wait lives as long
  as it does, so ``--timeout`` is not capped by ``max_query_timeout``.
- ``wait`` with no ``--timeout`` waits until a signal comes (the daemon pushes
  it; nothing polls). A wait that runs out exits 75; ``--json`` then prints SPEC
  §9's shape with nothing in it (``seq``, ``payload``, ``emitted_by``,
  ``emitted_at`` null, so a script reads ``.seq`` either way) and
  ``"received": false, "last_seq"``.
- The payload may follow NAME (SPEC §7 ``signal emit NAME [payload]``) or come with
  ``--payload`` (SPEC §9); either way it must be JSON (``'{"rows": 10}'``,
  ``'"text"'``, ``42``); a bare word that is not JSON is a usage error rather than a guess.
- ``--since`` takes what every ``--since`` takes (``90s``, ``10m``, ``2h``, ``1d``,
  plain seconds, or an RFC 3339 time); it reaches the daemon as seconds back from now.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import click

from meshctl.cli import _output, _time
from meshctl.cli._context import common_options, get_state
from meshctl.cli._own import OwnSession
from meshctl.cli._params import Seconds, Whole, json_text
from meshd.protocol.errors import MeshUnavailable, StorageUnavailable

FOREVER = 31_536_000.0  # the protocol's largest timeout: a year
#: SPEC §9's ``signal wait --json`` fields beside ``name`` (null when none came).
_SIGNAL_FIELDS = ("seq", "payload", "emitted_by", "emitted_at")


def parse_payload(text: str | None, given_as: str) -> Any:
    """The payload as JSON; a usage error naming it as the user gave it (``given_as``:
    ``PAYLOAD`` after NAME, or ``--payload``)."""
    if text is None:
        return None
    try:
        return json_text(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"{text!r} is not JSON (quote a string: '\"done\"')", param_hint=given_as
        ) from exc
    except ValueError as exc:  # NaN, Infinity: Python's json takes them, JSON does not
        raise click.BadParameter(f"{text!r} is not JSON: {exc}", param_hint=given_as) from exc


def render_signal(result: Mapping[str, Any]) -> str:
    payload = json.dumps(result.get("payload"), ensure_ascii=False)
    who, at = result.get("emitted_by") or "?", result.get("emitted_at")
    return f"{result.get('name')} #{result.get('seq')} from {who}, {_time.ago(at)}: {payload}"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@common_options
def signal() -> None:
    """Signals: named, numbered, durable events that pass the baton between sessions."""


@signal.command()
@common_options
@click.argument("name")
@click.argument("payload_arg", metavar="[PAYLOAD]", required=False)
@click.option("--payload", metavar="JSON", help="Any JSON value to carry (or give it after NAME).")
def emit(name: str, payload_arg: str | None, payload: str | None) -> None:
    """Emit NAME (its next sequence number); waiters are woken at once.

    \b
    Examples:
      meshctl signal emit research-done:2026-11-29 '{"rows": 12}'
      meshctl signal emit research-done:2026-11-29 --payload '{"rows": 12}'
    """
    if payload_arg is not None and payload is not None:
        raise click.UsageError("give the payload once: after NAME or with --payload")
    state = get_state()
    if payload is not None:
        value = parse_payload(payload, "--payload")
    else:
        value = parse_payload(payload_arg, "PAYLOAD")
    with OwnSession(state, "signal", f"signal emit {name}") as own:
        params: dict[str, Any] = {"name": name, "payload": value}
        if not own.reg.get("disabled"):
            params["session_id"] = own.sid
        result = own.mesh.call("signal.emit", params)
    _output.emit(state.json, result, lambda: f"Emitted {render_signal(_output.clean(result))}")


@signal.command()
@common_options
@click.argument("name")
@click.option("--after", type=Whole(min=0), metavar="SEQ", help="Only a newer one.")
@_time.since_option("a signal emitted")
@click.option("--timeout", type=Seconds(), metavar="S", help="Give up after S seconds.")
def wait(name: str, after: int | None, since: float | None, timeout: float | None) -> int:
    """The newest NAME newer than SEQ (or within D), waiting for one; 75 on timeout.

    \b
    Examples:
      meshctl signal wait research-done:2026-11-29 --timeout 3600
      meshctl signal wait build-ok --since 10m
    """
    state = get_state()
    if after is not None and since is not None:
        raise click.UsageError("give --after or --since, not both")
    limit = FOREVER if timeout is None else min(timeout, FOREVER)
    params: dict[str, Any] = {"name": name, "timeout": limit}
    if after is not None:
        params["after"] = after
    if since is not None:
        params["since"] = min(max(time.time() - since, 0.001), _time.FOREVER)
    from meshctl.cli._waiting import ran_out, waiting

    newer = f" newer than #{after}" if after is not None else ""
    with OwnSession(state, "signal", f"signal wait {name}") as own:
        if not own.reg.get("disabled"):
            params["session_id"] = own.sid
        try:
            with waiting(f"waiting for signal {name}{newer}", timeout):
                result = own.mesh.call("signal.wait", params, timeout=own.mesh.timeout + limit)
        except MeshUnavailable as exc:
            if isinstance(exc, StorageUnavailable):
                raise
            own.gone = True  # ending its session would start a daemon for nothing
            raise _output.went_away(
                exc, "waiting for the signal", f"no signal {name} was received"
            ) from exc
    if not result.get("received"):
        doc = {"name": name, **dict.fromkeys(_SIGNAL_FIELDS), "received": False}
        doc["last_seq"] = result.get("last_seq", 0)
        _output.emit(state.json, doc, None)
        ran_out(limit, f"no signal {name} came (last seq {doc['last_seq']})")
        return _output.EXIT_TEMPFAIL
    doc = {"name": result.get("name"), **{k: result.get(k) for k in _SIGNAL_FIELDS}}
    _output.emit(state.json, doc, lambda: render_signal(_output.clean(doc)))
    return _output.EXIT_OK
