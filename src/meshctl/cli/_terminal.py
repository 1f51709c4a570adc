"""What a terminal does with text: the cells it takes, and the width it has.

A line one cell wider than the terminal wraps, and a line redrawn in place with
``\r`` then leaves its first rows behind; a view cut by characters instead of
cells overflows on East Asian text. :func:`width` counts cells, :func:`cut` cuts
to them, :func:`columns` reads the terminal's width (again at every redraw: a
window can be resized meanwhile).

Standard library only; ``unicodedata`` is imported only for text that is not ASCII.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from typing import Any


def columns(stream: Any, default: int = 80) -> int:
    """The width of the terminal ``stream`` writes to now (``default`` when unknown)."""
    import os

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
