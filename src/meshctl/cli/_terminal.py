"""What a terminal does with text: the cells it takes, the width it has, its colours.

A line one cell wider than the terminal wraps, and a line redrawn in place with
``\r`` then leaves its first rows behind; a view cut by characters instead of
cells overflows on East Asian text. :func:`width` counts cells, :func:`cut` cuts
to them, :func:`columns` reads the terminal's width (again at every redraw: a
window can be resized meanwhile).

**Colour** marks what matters at a glance -- ``held`` and errors red, ``granted`` and
``free`` green, ``[stale]`` and a steal yellow -- on a terminal only, as git and
systemctl do: ``--color never`` or a non-empty ``NO_COLOR`` (no-color.org) turns it
off, ``--color always`` on (also into a pipe), ``TERM=dumb`` and pipes get none.
:func:`paint` works on whole lines by their first word, so every command's output
gets it in one place (:func:`meshctl.cli._output.echo`) and the text a test reads
in a pipe is unchanged. Text from other sessions cannot forge a colour: it is
escaped before it gets here (``\x1b`` shown, never sent).

Standard library only; ``unicodedata`` is imported only for text that is not ASCII.
"""

from __future__ import annotations

import os

from meshctl._core import env as _env

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from typing import Any


#: ``--color``: "auto", "always" or "never" (set by the option, on either path).
choice = "auto"

RED, GREEN, YELLOW, RESET = "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[0m"

#: A line's first word, and its colour.
_HEADS = (("held:", RED), ("granted ", GREEN), ("free:", GREEN), ("stole ", YELLOW),
          ("lost ", RED), ("error:", RED))  # fmt: skip


def colour(stream: Any) -> bool:
    """Whether what is written to ``stream`` gets colour now."""
    if choice != "auto":
        return choice == "always"
    if _env.get("NO_COLOR") or _env.get("TERM") == "dumb":
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def paint(text: str) -> str:
    """``text`` with each line's leading word coloured (see :data:`_HEADS`), and a
    trailing ``[stale]`` yellow."""
    return "\n".join(_paint_line(line) for line in text.split("\n"))


def _paint_line(line: str) -> str:
    for head, code in _HEADS:
        if line.startswith(head):
            word = head.rstrip()
            line = f"{code}{word}{RESET}{line[len(word) :]}"
            break
    if line.endswith("[stale]"):
        line = f"{line[:-7]}{YELLOW}[stale]{RESET}"
    return line


def error(text: str) -> str:
    """An error's first line in red (the hint after it stays plain)."""
    first, sep, rest = text.partition("\n")
    return f"{RED}{first}{RESET}{sep}{rest}"


def columns(stream: Any, default: int = 80) -> int:
    """The width of the terminal ``stream`` writes to now (``default`` when unknown)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns or default
    except (OSError, ValueError, AttributeError):
        return default


def width(text: str) -> int:
    """Cells ``text`` takes on a terminal: East Asian wide and full-width characters
    take two, combining marks none (ambiguous ones one, as most terminals draw them)."""
    if text.isascii():
        return len(text)
    import unicodedata

    return sum(_cells(c, unicodedata) for c in text)


def _cells(char: str, unicodedata: Any) -> int:
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def cut(text: str, room: int) -> str:
    """``text`` in at most ``room`` cells, its end replaced by ``…`` when cut."""
    if width(text) <= room:
        return text
    if text.isascii():
        return text[: max(room - 1, 0)] + "…"
    import unicodedata

    out, used = [], 0
    for char in text:
        cells = _cells(char, unicodedata)
        if used + cells > room - 1:
            break
        out.append(char)
        used += cells
    return "".join(out) + "…"
