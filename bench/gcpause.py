"""Full GC pause with 10,000 sessions, measured in-process.

``gc.collect()`` inside a running daemon cannot be timed from outside, so this
imports what the daemon imports (``meshd.app`` pulls in server, store, service,
handlers), builds a :class:`meshd.core.sessions.registry.Registry` on a
:class:`~meshd.core.clock.ManualClock` and registers the sessions through it, as
``session.register`` would, then times full collections. It runs in a fresh
process (``python -m bench.gcpause N REPEATS``) so the harness's own objects do
not count.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from bench.common import median


def measure(n: int, repeats: int, freeze: bool = False) -> dict[str, Any]:
    """With ``freeze``: ``gc.freeze()`` after the imports, before any session exists:
    what meshd does once at start-up (``app.Daemon.run``, after the restore), so the
    sessions registered afterwards are what a full collection still has to walk."""
    import meshd.app  # noqa: F401  (the daemon's whole module graph)
    from meshd.core.clock import ManualClock
    from meshd.core.sessions.registry import Registration, Registry
    from meshd.core.settings import Settings

    if freeze:
        gc.collect()
        gc.freeze()

    reg = Registry(ManualClock(), Settings(), "bench")
    for i in range(n):
        reg.register(
            Registration(
                session_id=f"cli:bench-{i}",
                source="cli",
                task="refactor the auth module and its tests",
                status="idle",
                model="claude",
                provider="anthropic",
                pid=None,
                pid_start=None,
                host="host",
                cwd="/home/user/project",
                repo="/home/user/project",
                branch="feat/auth",
                worktree=None,
                tools=["bash", "edit"],
                parent=None,
                slot=None,
                kanban_task=None,
                accept_queries=None,
                accept_messages=None,
                liveness="heartbeat",
                expire_after=None,
                bind=False,
                conn_id=None,
            )
        )
    gc.collect()
    times = _collections(repeats)
    return {
        "pause": median(times),
        "min": min(times),
        "objects": len(gc.get_objects()),
        "sessions": len(reg.sessions),
    }


def _collections(repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        gc.collect()
        times.append(time.perf_counter() - t)
    return times


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(measure(int(sys.argv[1]), int(sys.argv[2]), "freeze" in sys.argv[3:])))
