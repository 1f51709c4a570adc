"""What the CLI accepts on its command line, and which argument a refusal is about.

Three guards stand between argv and the wire:

- :class:`Seconds` takes a finite number of seconds in a range. ``nan``,
  ``inf`` and numbers too large for a socket timeout are usage errors (exit 2)
  here, where the option is named, instead of a crash or a wait that never ends.
- :func:`meshctl.cli._text.check_text` (click-free: every request passes it):
  Python hands undecodable argv bytes over as lone surrogates (PEP 383), which
  cannot be encoded as UTF-8 JSON. A key made of them is refused as ``BAD_KEY``
  (mesh keys are text; the bytes are shown as ``\\xe9``), any other text as a
  usage error naming its argument.
- :func:`json_text` reads JSON the user typed (``call``'s PARAMS_JSON, a signal's
  payload) strictly: Python's ``json`` takes ``NaN`` and ``Infinity``, which are not
  JSON; the client would refuse them anyway, so the CLI refuses them as bad input
  (exit 2), naming the argument.
- :func:`argument_for` maps a wire path from the daemon's ``INVALID_PARAMS``
  (``$.text``, ``$.resources[0]``) back to the argument the user typed
  (``TEXT…``, ``RES…``), so the refusal names what to change. A param the CLI
  built itself has no argument, and stays the daemon's error (exit 1).

Standard library and click only.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import click

from meshctl.cli import _output
from meshd.protocol.errors import InvalidParams, MeshError

#: The wire field a JSON path starts with (names the argument it came from).
_PATH_RE = re.compile(r"^\$\.([A-Za-z_][A-Za-z0-9_]*)")

#: The daemon's upper bound for durations (``meshd.protocol.methods.Seconds``).
ONE_YEAR = 31_536_000.0

#: Wire fields whose CLI parameter has another name.
_ALIASES = {
    "summary": "text",
    "query_id": "msg_id",
    "reply_to": "msg_id",
    "id": "handoff_id",
    "resource": "resources",
    "paths": "paths",
    "project_or_path": "project",
}


class Seconds(click.ParamType):  # type: ignore[type-arg]
    """A finite number of seconds, ``minimum`` (exclusive when ``open_min``) to ``maximum``."""

    name = "seconds"

    def __init__(
        self, *, minimum: float = 0.0, open_min: bool = False, maximum: float = ONE_YEAR
    ) -> None:
        self.minimum = minimum
        self.open_min = open_min
        self.maximum = maximum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float | int) and not isinstance(value, bool):
            number = float(value)
        else:
            try:
                number = float(str(value).strip())
            except ValueError:
                self.fail(f"'{_output.safe(str(value))}' is not a number of seconds", param, ctx)
        if not math.isfinite(number):
            self.fail(f"'{value}' is not a finite number of seconds", param, ctx)
        low = number <= self.minimum if self.open_min else number < self.minimum
        if low or number > self.maximum:
            sign = ">" if self.open_min else ">="
            self.fail(
                f"{number:g} is out of range: give seconds {sign} {self.minimum:g} "
                f"and at most {self.maximum:.0f}",
                param,
                ctx,
            )
        return number

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "S"


class Whole(click.IntRange):
    """click's ``IntRange``, refusing in a user's words: ``'abc' is not a valid whole
    number`` (click says "integer range", though one number was asked for)."""

    name = "whole number"


def argument_for(path: str, ctx: click.Context | None) -> str | None:
    """The CLI argument a wire path (``$.text``, ``$.resources[0]``) came from, if any."""
    match = _PATH_RE.match(path or "")
    if match is None or ctx is None:
        return None
    field = match.group(1)
    name = _ALIASES.get(field, field)
    for param in ctx.command.params:  # the command's own: register --id, prioritize ID
        if param.name == name:
            if isinstance(param, click.Option):
                return max(param.opts, key=len)
            return param.human_readable_name
    if field == "session_id" and ctx.command.name != "call":  # call: the user's own JSON
        return "--session (MESH_SESSION)"
    return None


_PLAIN: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), words)
    for pattern, words in (
        (r"^Expected `str` of length >= 1$", "must not be empty"),
        (r"^Expected `str` of length <= (\d+)$", r"is too long (at most \1 characters)"),
        (r"^Expected `array` of length >= 1$", "needs at least one value"),
        (r"^Expected `array` of length <= (\d+)$", r"has too many values (at most \1)"),
        (r"^Expected `(?:float|int)` ([<>]=?) (\S+)$", r"must be \1 \2"),
        (
            r"^Expected `str` matching regex '\^\[\^\\\\s\]\+\$'$",
            "must be one word: no spaces, tabs or line breaks",
        ),
        (
            r"^Expected `str` matching regex '\^\[A-Za-z0-9_\.-\]\{1,64\}\$'$",
            "use 1-64 characters from A-Z a-z 0-9 _ . -",
        ),
        (r"^Expected `str` matching regex .*$", "is not in the accepted form"),
        # an empty value the client left out (``--reason ''``) is missing on the wire
        (r"^Object missing required field `\w+`$", "must not be empty"),
        (r"^Expected `(\w+)`, got `(\w+)`$", r"must be a \1, not a \2"),
    )
)


def plain(message: str) -> str:
    """The daemon's validation sentence in a user's words (msgspec's wording mapped)."""
    text = message.removeprefix("Invalid params: ")
    text = re.sub(r" - at `\$[^`]*`$", "", text)
    for pattern, words in _PLAIN:
        if pattern.match(text):
            return pattern.sub(words, text)
    return text.replace("`", "")


def usage_from(exc: MeshError, ctx: click.Context | None) -> _output.Failure | None:
    """A daemon ``INVALID_PARAMS`` about an argument the user typed, as a usage error.

    ``None`` when the refused param is not one of the command's arguments (the CLI
    built it, or the path is missing): that stays the daemon's error, exit 1.
    """
    if not isinstance(exc, InvalidParams):
        return None
    path = str(exc.data.get("path") or "")
    where = argument_for(path, ctx)
    if where is None:
        return None
    return _output.Failure(
        f"{where}: {plain(exc.message)}",
        "INVALID_PARAMS",
        code=exc.code,
        exit_code=_output.EXIT_USAGE,
        data={"path": path, "argument": where},
        hint=f"see `{ctx.command_path} --help`" if ctx is not None else "",
    )


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (JSON numbers are finite)")


def json_text(text: str) -> Any:
    """``json.loads`` that refuses ``NaN``, ``Infinity`` and ``-Infinity`` (ValueError,
    whose message says so; a JSONDecodeError for anything else that is not JSON)."""
    return json.loads(text, parse_constant=_not_json)
