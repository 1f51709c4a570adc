"""Params and results of ``fleet.*``: how this host sees the fleet (SPEC §12, §9).

``fleet.status`` answers whether or not ``[fleet]`` is configured (``configured:
false`` then, and nothing else), so ``meshctl fleet status`` and ``meshctl
doctor`` ask one question everywhere.
"""

from __future__ import annotations

from typing import Any

from meshd.protocol.methods import Empty, MethodSpec, Result


class FleetHost(Result):
    """Another host this one sees in the fleet's registry bucket."""

    host: str
    sessions: int
    lag_s: float
    """Seconds since its registry entry last changed here (it refreshes every
    ``heartbeat_interval``; more than about two of those and it is ``stale``)."""
    stale: bool
    version: str = ""


class FleetStatusResult(Result):
    """The fleet link and what this host sees through it; ``configured: false`` without
    a ``[fleet]`` table (everything stays on this host)."""

    configured: bool
    connected: bool = False
    host: str = ""
    """This host's name in the fleet."""
    urls: list[str] = []
    server: str | None = None
    """The server the link is connected to now."""
    server_version: str | None = None
    rtt_ms: float | None = None
    last_error: str | None = None
    since_s: float | None = None
    """Seconds the link has been in its present state (up or down)."""
    connects: int = 0
    """How many times the link came up since the daemon started."""
    hosts: list[FleetHost] = []
    published_s: float | None = None
    """Seconds since this host last wrote its sessions to the fleet."""
    shared_kinds: list[str] = []
    shared_paths: list[str] = []
    on_partition: str = "fail"
    local_only: list[str] = []
    """What holds on this host alone while the fleet is out of reach (claims granted
    ``local-only``, messages waiting to be sent)."""
    parts: dict[str, Any] = {}
    """Each fleet part's own figures (registry, claims, messages)."""


FLEET_STATUS = MethodSpec(
    "fleet.status", Empty, FleetStatusResult, "The fleet link and the hosts it sees."
)
