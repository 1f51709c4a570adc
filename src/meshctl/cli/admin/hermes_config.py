"""Add or remove a plugin key in ``plugins.enabled`` of a Hermes ``config.yaml``, in place.

The only way ``meshctl hermes install`` and ``uninstall`` change a Hermes config:
``hermes plugins enable`` would rewrite the whole file through Hermes's config
writer (every comment gone, ``_config_version``, ``disabled: []``, ``entries:`` and
a block of commented defaults added), and ``hermes plugins disable`` would add a
``disabled`` entry nobody wrote. Standard library only, so no YAML library: the
edit touches the ``plugins:`` block's ``enabled``/``disabled`` lists and nothing
else, keeping every other byte (comments, line endings, a missing final newline)
exactly as it was. Both list styles Hermes and people write are understood: flow
(``enabled: [a, b]``) and block (``- a`` lines).

:func:`enable` says what it added (:data:`ADDED`), and :func:`disable` given that
answer takes out exactly that, so install then uninstall leaves the file
byte-identical, and what a person changed in between stays.
"""

from __future__ import annotations

import re

_TOP = re.compile(r"^plugins:\s*(#.*)?$")
_KEY = re.compile(r"^(\s+)(enabled|disabled):[ \t]*(.*?)\s*$")


def _block(lines: list[str]) -> tuple[int, int] | None:
    """(first, end) line indexes of the ``plugins:`` block's body, or None."""
    for i, line in enumerate(lines):
        if _TOP.match(line):
            end = i + 1
            while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t"):
                end += 1
            while end > i + 1 and not lines[end - 1].strip():
                end -= 1
            return i + 1, end
    return None


def _flow_items(value: str) -> list[str] | None:
    value = value.split(" #", maxsplit=1)[0].strip()
    if value in ("", "null", "~"):
        return None if value == "" else []
    if not (value.startswith("[") and value.endswith("]")):
        return None
    return [v.strip().strip("'\"") for v in value[1:-1].split(",") if v.strip()]


def _item(line: str) -> str | None:
    """The name on a block-list line (``- name  # comment``), else None."""
    stripped = line.strip()
    if not stripped.startswith("- "):
        return None
    return stripped[2:].split(" #", maxsplit=1)[0].strip().strip("'\"")


def _list_span(lines: list[str], at: int, end: int, indent: str) -> tuple[int, list[str]]:
    """Block-list items after line ``at``: (index past the last item, item names)."""
    items: list[str] = []
    j = at + 1
    while j < end:
        name = _item(lines[j])
        depth = len(lines[j]) - len(lines[j].lstrip())
        if name is not None and depth >= len(indent):
            items.append(name)
        elif lines[j].strip() and not lines[j].strip().startswith("#"):
            break
        j += 1
    while j > at + 1 and not lines[j - 1].strip():
        j -= 1
    return j, items


def _edit_block(lines: list[str], i: int, end: int, name: str, add: bool) -> None:
    """Add or remove ``name`` in the block list under line ``i`` (``key:`` alone)."""
    m = _KEY.match(lines[i])
    assert m is not None
    indent, key = m.group(1), m.group(2)
    stop, items = _list_span(lines, i, end, indent)
    if add:
        if name not in items:
            last = lines[stop - 1] if items else f"{indent}- "
            lines.insert(stop, f"{last[: len(last) - len(last.lstrip())]}- {name}")
        return
    for j in range(stop - 1, i, -1):
        if _item(lines[j]) == name:
            del lines[j]
    if not _list_span(lines, i, end - 1, indent)[1]:
        lines[i] = f"{indent}{key}: []"


def _edit(lines: list[str], span: tuple[int, int], key: str, name: str, add: bool) -> None:
    first, end = span
    for i in range(first, end):
        m = _KEY.match(lines[i])
        if m is None or m.group(2) != key:
            continue
        flow = _flow_items(m.group(3))
        if flow is None and m.group(3) not in ("null", "~"):
            _edit_block(lines, i, end, name, add)
            return
        items = [x for x in flow or [] if x != name] + ([name] if add else [])
        value = m.group(3)
        comment = value[value.index("]") + 1 :] if "]" in value else ""  # kept as written
        tail = lines[i][len(lines[i].rstrip()) :]
        lines[i] = f"{m.group(1)}{key}: [{', '.join(items)}]{comment}{tail}"
        return
    if add:
        indent = next(
            (ln[: len(ln) - len(ln.lstrip())] for ln in lines[first:end] if ln.strip()), ""
        )
        lines.insert(first, f"{indent or '  '}{key}: [{name}]")


def set_enabled(text: str, name: str, enabled: bool) -> str:
    """``text`` with ``name`` added to (or removed from) ``plugins.enabled``.

    Enabling also takes the name out of ``plugins.disabled`` (which always wins in
    Hermes). Every other line is kept as it was.
    """
    lines = text.splitlines()
    span = _block(lines)
    if span is None:
        if not enabled:
            return text
        block = f"plugins:\n  enabled: [{name}]\n"
        if not text:
            return block
        return text + ("" if text.endswith("\n") else "\n") + block
    if enabled:
        _edit(lines, span, "disabled", name, add=False)
        span = _block(lines) or span
    _edit(lines, span, "enabled", name, add=enabled)
    return "\n".join(lines) + "\n"


#: What ``hermes plugins enable NAME --no-allow-tool-override`` writes under
#: ``plugins.entries.NAME`` (and nothing a person configured).
_ENABLE_ENTRY = re.compile(r"^\s+allow_tool_override:\s*(false|true)\s*$")
_ENTRIES = re.compile(r"^(\s+)entries:\s*(#.*)?$")


def drop_entry(text: str, name: str) -> str:
    """``text`` without ``plugins.entries.NAME`` when it holds only what
    ``hermes plugins enable`` wrote there (``allow_tool_override``), so an uninstall
    leaves no trace of the plugin; an entry a person added settings to is kept."""
    lines = text.splitlines()
    span = _block(lines)
    if span is None:
        return text
    first, end = span
    for i in range(first, end):
        m = _ENTRIES.match(lines[i])
        if m is None:
            continue
        body = _under(lines, i, end)
        for j in range(i + 1, body):
            if lines[j].split(" #", maxsplit=1)[0].strip() != f"{name}:":
                continue
            k = _under(lines, j, body)
            own = [x for x in lines[j + 1 : k] if x.strip()]
            if not own or not all(_ENABLE_ENTRY.match(x) for x in own):
                return text
            del lines[j:k]
            if _under(lines, i, body - (k - j)) == i + 1:
                lines[i] = f"{m.group(1)}entries: {{}}"
            return "\n".join(lines) + "\n"
        return text
    return text


def _under(lines: list[str], at: int, end: int) -> int:
    """Index past the last line nested under line ``at`` (deeper than it)."""
    depth = len(lines[at]) - len(lines[at].lstrip())
    past, j = at + 1, at + 1
    while j < end and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > depth):
        if lines[j].strip():
            past = j + 1
        j += 1
    return past


def is_enabled(text: str, name: str) -> bool:
    """Whether ``name`` is in ``plugins.enabled`` and not in ``plugins.disabled``."""
    lines = text.splitlines()
    span = _block(lines)
    if span is None:
        return False
    found: dict[str, list[str]] = {"enabled": [], "disabled": []}
    first, end = span
    for i in range(first, end):
        m = _KEY.match(lines[i])
        if m is None:
            continue
        flow = _flow_items(m.group(3))
        found[m.group(2)] = flow if flow is not None else _list_span(lines, i, end, m.group(1))[1]
    return name in found["enabled"] and name not in found["disabled"]


#: What :func:`enable` added: the whole ``plugins:`` block (``block-nl``: and the
#: newline the file did not end with), the ``enabled:`` key in an existing block, an
#: item under an ``enabled:`` that had no value, one item in a list, nothing.
ADDED = ("block", "block-nl", "key", "value", "item", "")


def _style(text: str) -> tuple[str, bool]:
    """(line ending, whether the text ends with one)."""
    nl = "\r\n" if "\r\n" in text else "\n"
    return nl, text.endswith("\n")


def _join(lines: list[str], nl: str, final: bool) -> str:
    return nl.join(lines) + (nl if final and lines else "")


def enable(text: str, name: str) -> tuple[str, str]:
    """(``text`` with ``name`` in ``plugins.enabled``, what was added: :data:`ADDED`).

    Also takes the name out of ``plugins.disabled`` (which always wins in Hermes).
    """
    if is_enabled(text, name):
        return text, ""
    nl, final = _style(text)
    lines = text.splitlines()
    span = _block(lines)
    if span is None:
        block = ["plugins:", f"  enabled: [{name}]"]
        if not text or final:
            return text + _join(block, nl, True), "block"
        return text + nl + _join(block, nl, True), "block-nl"
    keys = [m for i in range(*span) if (m := _KEY.match(lines[i])) and m.group(2) == "enabled"]
    added = "key" if not keys else "value" if keys[0].group(3) == "" else "item"
    _edit(lines, span, "disabled", name, add=False)
    span = _block(lines) or span
    _edit(lines, span, "enabled", name, add=True)
    return _join(lines, nl, final), added


def disable(text: str, name: str, added: str = "item") -> str:
    """``text`` without ``name`` in ``plugins.enabled``; ``added``: what :func:`enable`
    added (:data:`ADDED`), so that a key or block holding only ``name`` goes too.
    Everything else is kept byte for byte."""
    nl, final = _style(text)
    lines = text.splitlines()
    span = _block(lines)
    if span is None:
        return text
    first, end = span
    for i in range(first, end):
        m = _KEY.match(lines[i])
        if m is None or m.group(2) != "enabled":
            continue
        flow = _flow_items(m.group(3))
        stop, items = (i + 1, flow) if flow is not None else _list_span(lines, i, end, m.group(1))
        if items != [name] or added not in ("block", "block-nl", "key", "value"):
            break
        if added == "value":
            del lines[i + 1 : stop]
            return _join(lines, nl, final)
        del lines[i:stop]
        if added != "key" and not any(x.strip() for x in lines[first : end - (stop - i)]):
            del lines[first - 1 : end - (stop - i)]
            if added == "block-nl":
                return nl.join(lines)
        return _join(lines, nl, final) if lines else ""
    before = "\n".join(lines)
    edited = set_enabled(before + "\n", name, False)
    if edited == before + "\n":
        return text
    return _join(edited.splitlines(), nl, final)
