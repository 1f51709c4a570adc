"""What this host knows of its own fleet claims: grants, refusals, waits.

The bucket says who holds what for every host (:mod:`meshd.fleet.claim_records`);
these records are this host's side of it, kept in memory by
:class:`meshd.fleet.claims.FleetClaims` and rebuilt from the lock table and the
bucket at each link-up (:mod:`meshd.fleet.claim_upkeep`). What the fleet needs of
this host's lock table is the :class:`~meshd.ports.ClaimTable` port.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from meshd.fleet.claim_records import Entry, Step
from meshd.keys import Key
from meshd.protocol.claims import Mode

WAIT_RECORD = Step("w.", "", "hold")
"""In the release backlog: delete the request's wait record (``w.<gid>``)."""
COMMIT_RECORD = Step("g.", "", "hold")
"""In the release backlog: delete the set's commit record (``g.<gid>``): its token dies."""


@dataclass(slots=True)
class FleetGrant:
    """A set this host holds in the fleet: its commit record ``gid`` and token."""

    gid: str
    session_id: str
    mode: Mode
    token: int
    keys: dict[str, Key] = field(default_factory=dict)  # resource text -> key
    revs: dict[str, int] = field(default_factory=dict)
    """Record name -> the revision that wrote this grant's entry there: the watch may
    still deliver older versions of the record, which do not count as a loss."""


@dataclass(frozen=True, slots=True)
class FleetHeld:
    """Not granted: these entries (resource, entry) keep the set out."""

    blocking: tuple[tuple[str, Entry], ...]


@dataclass(slots=True)
class FleetWaiter:
    """A request in line in the fleet: its ``w.<gid>`` record's revision is its ticket."""

    gid: str
    session_id: str
    keys: tuple[Key, ...]
    mode: Mode
    ticket: int
    since: float
    """Wall time it began to wait."""
    paused: bool = False
    """Its session paused while it waited: it leaves the line, answered ``held``
    (:meth:`~meshd.fleet.claims.FleetClaims.paused`)."""
