"""The frontend-neutral tool definitions (:mod:`meshctl.agent`), wherever they are.

Installed as a folder, the plugin carries a copy in ``_vendor/agent/`` (Hermes's
environment has no session-mesh); loaded through the entry point, it uses the
installed ``meshctl.agent``. Both are the same code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from meshctl.agent import advice, context, tools
else:
    try:
        _root = importlib.import_module("._vendor.agent", __package__).__name__
    except ImportError:
        _root = "meshctl.agent"
    advice = importlib.import_module(_root + ".advice")
    context = importlib.import_module(_root + ".context")
    tools = importlib.import_module(_root + ".tools")

__all__ = ["advice", "context", "tools"]
