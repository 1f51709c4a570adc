"""Edit a JSON file as text: add or remove one member or element, nothing else moves.

A settings file a person keeps (Claude Code's ``settings.json``) has their key
order, their indentation, their blank lines. Loading it and dumping it again would
rewrite all of that, and an uninstall could then never give the file back as it
was. So an edit here is a splice: the text is parsed only to find where each value
starts and ends (:func:`parse`), and an insertion adds one contiguous piece of text
that a later removal takes out again, separator and all:

- a member or element is added *last* in its container, after a comma, with the
  same whitespace in front of it that the container's last item has (so a two-space
  file stays two-space, a one-line object stays on one line);
- removing the last item takes the comma and whitespace in front of it; removing
  any other item takes the comma and whitespace after it. Either way, removing
  what was added gives back the text from before, byte for byte, whatever the user
  edited elsewhere in between;
- an empty container gets its item on a line of its own, and becomes ``{}``/``[]``
  again when that item goes.

Standard library only (``json`` decodes the strings and numbers).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class SpliceError(ValueError):
    """The text is not JSON (the message says where), or not the shape expected."""


@dataclass
class Node:
    """One value of the document, with where it is in the text.

    ``items`` holds an object's members as ``(key, start, node)`` (``start``: where
    the member's key begins) and an array's elements as ``(None, start, node)``.
    """

    kind: str  # "object", "array" or "scalar"
    start: int
    end: int
    items: list[tuple[str | None, int, Node]] = field(default_factory=list)
    value: Any = None

    def get(self, key: str) -> Node | None:
        """The member ``key`` of an object (the last one, as ``json.loads`` takes it)."""
        found = None
        for k, _, node in self.items:
            if k == key:
                found = node
        return found

    def plain(self, text: str) -> Any:
        """The value as Python data."""
        return json.loads(text[self.start : self.end])


def parse(text: str) -> Node:
    """The document's tree of spans; raises :class:`SpliceError` on anything not JSON."""
    node, pos = _value(text, _skip(text, 0))
    if _skip(text, pos) != len(text):
        raise SpliceError(f"unexpected text after the JSON value at character {pos}")
    return node


def _skip(text: str, pos: int) -> int:
    m = _WS.match(text, pos)
    return m.end() if m else pos


def _value(text: str, pos: int) -> tuple[Node, int]:
    if pos >= len(text):
        raise SpliceError("the JSON ends too early")
    ch = text[pos]
    if ch in "{[":
        return _container(text, pos)
    try:
        value, end = _DECODER.raw_decode(text, pos)
    except ValueError as exc:
        raise SpliceError(f"not JSON at character {pos}: {exc}") from exc
    return Node("scalar", pos, end, value=value), end


def _container(text: str, pos: int) -> tuple[Node, int]:
    is_object = text[pos] == "{"
    close = "}" if is_object else "]"
    node = Node("object" if is_object else "array", pos, pos)
    pos = _skip(text, pos + 1)
    if pos < len(text) and text[pos] == close:
        node.end = pos + 1
        return node, pos + 1
    while True:
        start = pos
        key = None
        if is_object:
            if pos >= len(text) or text[pos] != '"':
                raise SpliceError(f"expected a key in quotes at character {pos}")
            key_node, pos = _value(text, pos)
            key = str(key_node.value)
            pos = _skip(text, pos)
            if pos >= len(text) or text[pos] != ":":
                raise SpliceError(f"expected ':' at character {pos}")
            pos = _skip(text, pos + 1)
        child, pos = _value(text, pos)
        node.items.append((key, start, child))
        pos = _skip(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos = _skip(text, pos + 1)
            continue
        if pos < len(text) and text[pos] == close:
            node.end = pos + 1
            return node, pos + 1
        raise SpliceError(f"expected ',' or '{close}' at character {pos}")


def _line_indent(text: str, pos: int) -> str:
    """The whitespace at the start of the line ``pos`` is on."""
    line_start = text.rfind("\n", 0, pos) + 1
    m = _WS.match(text, line_start)
    return text[line_start : m.end() if m else line_start].replace("\n", "")


def indent_unit(text: str, root: Node) -> str:
    """The file's indentation step (two spaces when it shows none)."""
    for _, start, _node in root.items:
        inner = _line_indent(text, start)
        outer = _line_indent(text, root.start)
        if text.rfind("\n", root.start, start) != -1 and inner.startswith(outer):
            step = inner[len(outer) :]
            if step:
                return step
    return "  "


def render(value: Any, unit: str, indent: str) -> str:
    """``value`` as JSON in the file's style, its continuation lines at ``indent``."""
    body = json.dumps(value, indent=len(unit) if unit.strip(" ") == "" else unit,
                      ensure_ascii=False)  # fmt: skip
    return body.replace("\n", "\n" + indent)


def insert(text: str, container: Node, value: Any, key: str | None = None) -> str:
    """``text`` with ``value`` added last in ``container`` (as member ``key`` of an object)."""
    root = parse(text)
    unit = indent_unit(text, root)
    if container.items:
        _, last_start, last = container.items[-1]
        gap_from = container.items[-2][2].end if len(container.items) > 1 else container.start
        gap = text[gap_from:last_start]
        gap = gap[gap.index(",") + 1 :] if "," in gap else gap[1:]  # after the comma / bracket
        indent = _line_indent(text, last_start) if "\n" in gap else _line_indent(text, last.end)
        piece = _member(key, render(value, unit, indent))
        return text[: last.end] + "," + gap + piece + text[last.end :]
    outer = _line_indent(text, container.start)
    indent = outer + unit
    piece = _member(key, render(value, unit, indent))
    inside = "\n" + indent + piece + "\n" + outer
    return text[: container.start + 1] + inside + text[container.end - 1 :]


def _member(key: str | None, body: str) -> str:
    return body if key is None else json.dumps(key, ensure_ascii=False) + ": " + body


def remove(text: str, container: Node, index: int) -> str:
    """``text`` without item ``index`` of ``container`` (and the separator it came with)."""
    items = container.items
    _, start, node = items[index]
    if len(items) == 1:
        return text[: container.start + 1] + text[container.end - 1 :]
    if index == len(items) - 1:
        prev_end = items[index - 1][2].end
        return text[:prev_end] + text[node.end :]
    next_start = items[index + 1][1]
    return text[:start] + text[next_start:]


def find(root: Node, path: list[str]) -> Node | None:
    """The node at ``path`` (object keys) below ``root``, or None."""
    node: Node | None = root
    for key in path:
        if node is None or node.kind != "object":
            return None
        node = node.get(key)
    return node
