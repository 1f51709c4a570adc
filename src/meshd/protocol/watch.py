"""``mesh.watch``: a live feed of what changes, for viewers such as ``meshctl top``.

The connection that calls it receives ``mesh.changed`` events (SPEC §3 ``event``
notifications) naming what changed durably — ``session``, ``claim``, ``message``,
``handoff``, ``board``, ``job``, ``note``, ``signal``, ``ledger`` … — coalesced to at
most one per :data:`WATCH_INTERVAL`; the viewer re-reads what it shows. Status and
task changes arrive with the next snapshot (``snapshot_interval``).
"""

from __future__ import annotations

from meshd.protocol.methods import Empty, MethodSpec, Result

WATCH_INTERVAL = 0.25
WATCH_CHANNEL = "*watch"
"""The subscription channel (not a session id: ids have no ``*``)."""


class WatchResult(Result):
    watching: bool
    interval: float


MESH_WATCH = MethodSpec("mesh.watch", Empty, WatchResult, "Push mesh.changed events here.")
