"""Which asyncio event loop the daemon runs on: plain asyncio, or uvloop when asked.

The daemon runs anyio on its asyncio backend either way; uvloop only replaces the loop
underneath (``backend_options={"use_uvloop": True}``), so nothing above it changes.
``MESH_EVENT_LOOP`` chooses: ``asyncio`` (unset: the default), ``uvloop``, or ``auto``
(uvloop when importable). uvloop is an optional extra (``session-mesh[uvloop]``), not
the default: measured on the daemon's request path it saved 4-13% of the CPU a request
costs (docs/bench-runs/2026-12-01-notebook.md, "Request path"), not the clear win
that would justify a compiled dependency everywhere. The test suite runs the daemon on both loops.
"""

from __future__ import annotations

import os
from typing import Any

ENV = "MESH_EVENT_LOOP"
CHOICES = ("auto", "uvloop", "asyncio")


class LoopChoiceError(ValueError):
    """``MESH_EVENT_LOOP`` names a loop that is unknown or not installed."""


def choose(value: str | None = None) -> str:
    """The loop to run: ``"uvloop"`` or ``"asyncio"``, from ``value`` or the environment."""
    want = (os.environ.get(ENV, "") if value is None else value).strip().lower() or "asyncio"
    if want not in CHOICES:
        raise LoopChoiceError(
            f"{ENV}={want!r} is not a known event loop: use one of {', '.join(CHOICES)}"
        )
    if want == "asyncio":
        return want  # the default: no search of sys.path for uvloop on the way to serving
    import importlib.util

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
