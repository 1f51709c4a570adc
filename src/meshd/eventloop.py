"""Which asyncio event loop the daemon runs on: uvloop where it is installed, else asyncio.

The daemon runs anyio on its asyncio backend either way; uvloop only replaces the loop
underneath (``backend_options={"use_uvloop": True}``), so nothing above it changes. Its
loop does in C what asyncio's does in Python -- the selector, callbacks, futures' wake-ups
-- which is most of what a small request costs once the handler is cheap (measured in
docs/PERFORMANCE.md, "Request path"). ``MESH_EVENT_LOOP`` chooses:
``uvloop``, ``asyncio``, or unset / ``auto`` (uvloop when importable). Plain asyncio is
the fallback wherever uvloop has no wheel; the test suite runs the daemon on both.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

ENV = "MESH_EVENT_LOOP"
CHOICES = ("auto", "uvloop", "asyncio")


class LoopChoiceError(ValueError):
    """``MESH_EVENT_LOOP`` names a loop that is unknown or not installed."""


def choose(value: str | None = None) -> str:
    """The loop to run: ``"uvloop"`` or ``"asyncio"``, from ``value`` or the environment."""
    want = (os.environ.get(ENV, "") if value is None else value).strip().lower() or "auto"
    if want not in CHOICES:
        raise LoopChoiceError(
            f"{ENV}={want!r} is not a known event loop: use one of {', '.join(CHOICES)}"
        )
    have_uvloop = importlib.util.find_spec("uvloop") is not None
    if want == "uvloop" and not have_uvloop:
        raise LoopChoiceError(
            f"{ENV}=uvloop but uvloop is not installed here: pip install uvloop, "
            f"or unset {ENV} to run on asyncio"
        )
    if want == "auto":
        return "uvloop" if have_uvloop else "asyncio"
    return want


def backend_options(loop: str) -> dict[str, Any]:
    """anyio's ``backend_options`` for ``loop``."""
    return {"use_uvloop": True} if loop == "uvloop" else {}
