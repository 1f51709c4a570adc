"""What the plugin says to people (session lines), and the shared model-facing text.

The framing, inbox lines and write warnings every frontend uses live in
:mod:`meshctl.agent.advice`; they are re-exported here for the plugin's modules.
Pure functions only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from ._agent import advice

Doc = Mapping[str, Any]

#: Shared with every frontend (:mod:`meshctl.agent.advice`).
FRAME = advice.FRAME
MAX_TASK = advice.MAX_TASK
one_line = advice.one_line
sender_label = advice.sender_label
item_line = advice.item_line


def delivery(items: Iterable[Doc], notes: Iterable[str] = (), mode: str = "compact") -> str:
    """:func:`meshctl.agent.advice.delivery`, and a notice with no inbox id (a
    changed-file notice pushed to the plugin, :mod:`._view`) shown without a number."""
    lines = [*notes]
    for i in items:
        if i.get("id") is None and i.get("kind") == "notice":
            lines.append(f"- {sender_label(str(i.get('from', '')))} notice: {i.get('text', '')}")
        else:
            lines.append(item_line(i, mode))
    return "\n".join([FRAME, *lines]) if lines else ""


def session_line(s: Doc, me: str | None = None, home: str | None = None) -> str:
    """One live session, as ``meshctl sessions active`` shows it."""
    home = home if home is not None else os.path.expanduser("~")
    parts = [str(s.get("task") or "(no task)")]
    cwd = s.get("cwd")
    if cwd:
        cwd = str(cwd)
        parts.append("in " + ("~" + cwd[len(home) :] if home and cwd.startswith(home) else cwd))
    if s.get("branch"):
        parts.append(f"branch {s['branch']}")
    parts.append(f"status: {s.get('status', '?')}")
    claims = [  # resources, or the daemon's claim objects
        str(c.get("resource") if isinstance(c, Mapping) else c) for c in s.get("claims") or []
    ]
    if claims:
        parts.append("holds " + ", ".join(claims))
    mark = "  (you)" if me is not None and s.get("session_id") == me else ""
    stale = "  [stale]" if s.get("stale") else ""
    return f"- {s.get('session_id')} ({s.get('source', '?')}) — {', '.join(parts)}{stale}{mark}"
