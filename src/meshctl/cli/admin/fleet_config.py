"""Edit the ``[fleet]`` table of config.toml for ``meshctl fleet join``/``leave`` (SPEC §12).

The standard library reads TOML but does not write it, and a person's config file
has comments and an order worth keeping; so the edit is textual: the lines of the
``[fleet]`` table (its header up to the next table header) are replaced by a new
table, or removed, and every other line stays byte for byte. The new table keeps
the keys the person set before (``shared_paths``, ``name``, …) and changes only
what the command was given. Nothing here writes: :func:`with_fleet` and
:func:`without_fleet` return the new text; the command checks it with the
daemon's own loader before it replaces the file.
"""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

_HEADER = re.compile(r"^\s*\[\s*fleet\s*\]\s*(#.*)?$")
_ANY_HEADER = re.compile(r"^\s*\[")

ORDER = ("url", "name", "creds", "nkey", "tls_ca", "shared_kinds", "shared_paths", "on_partition")


class FleetConfigError(Exception):
    """The file cannot be edited safely; the message says what to do by hand."""


def current(text: str) -> dict[str, Any] | None:
    """The ``[fleet]`` table as it stands (None: there is none)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FleetConfigError(f"the file is not valid TOML ({exc}); fix it first") from exc
    table = doc.get("fleet")
    if table is not None and not isinstance(table, dict):
        raise FleetConfigError("`fleet` is not a table; write it as [fleet] by hand")
    return table


def _split(text: str) -> tuple[list[str], list[str], list[str]]:
    """The lines before the ``[fleet]`` table, the table's lines, the lines after it."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if _HEADER.match(line)), None)
    if start is None:
        return lines, [], []
    end = next((i for i in range(start + 1, len(lines)) if _ANY_HEADER.match(lines[i])), len(lines))
    return lines[:start], lines[start:end], lines[end:]


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return json.dumps(str(v), ensure_ascii=False)  # a TOML basic string


def render(table: dict[str, Any]) -> str:
    """``table`` as a ``[fleet]`` table, known keys in their usual order."""
    keys = [k for k in ORDER if k in table] + sorted(k for k in table if k not in ORDER)
    return "[fleet]\n" + "".join(f"{k} = {_value(table[k])}\n" for k in keys)


def with_fleet(text: str, changes: dict[str, Any]) -> str:
    """``text`` with its ``[fleet]`` table set to the old one updated by ``changes``
    (a ``None`` value removes that key), appended at the end if there was none."""
    old = current(text)
    before, table, after = _split(text)
    if old is not None and not table:
        raise FleetConfigError(
            "the fleet keys are not written as a [fleet] table (dotted keys?); edit them by hand"
        )
    new = {**(old or {}), **changes}
    new = {k: v for k, v in new.items() if v is not None}
    block = render(new)
    if table:
        tail = "\n" if after else ""
        return "".join(before) + block + tail + "".join(after)
    head = "".join(before)
    if head and not head.endswith("\n"):
        head += "\n"
    return head + ("\n" if head.strip() else "") + block


def without_fleet(text: str) -> str:
    """``text`` without its ``[fleet]`` table (unchanged if there is none)."""
    if current(text) is None:
        return text
    before, table, after = _split(text)
    if not table:
        raise FleetConfigError(
            "the fleet keys are not written as a [fleet] table (dotted keys?); edit them by hand"
        )
    head, rest = "".join(before).rstrip("\n"), "".join(after)
    if head and rest:
        return f"{head}\n\n{rest}"
    return f"{head}\n" if head else rest


__all__ = ["FleetConfigError", "current", "render", "with_fleet", "without_fleet"]
