"""What this host knows of its own fleet claims: grants, refusals, waits.

The bucket says who holds what for every host (:mod:`meshd.fleet.claim_records`);
these records are this host's side of it, kept in memory in one :class:`GrantBook`
that every part of :class:`meshd.fleet.claims.FleetClaims` shares (the requests, the
line, the releases, the reads, the upkeep), and rebuilt from the lock table and the
bucket at each link-up (:mod:`meshd.fleet.claim_upkeep`). What the fleet needs of
this host's lock table is the :class:`~meshd.ports.ClaimTable` port.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from meshd.fleet.claim_records import Entry, Seen, Step
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
    (:meth:`~meshd.fleet.claim_line.FleetLine.paused`)."""


class GrantBook:
    """This host's fleet claims as it knows them: its grants, the acquires in flight,
    its requests in line, the sets granted here alone, and the newest version of each
    record seen. One per :class:`~meshd.fleet.claims.FleetClaims`; its parts read and
    write it, none keeps a copy."""

    def __init__(self, host_token: str) -> None:
        self.grants: dict[str, FleetGrant] = {}
        self.by_claim: dict[tuple[str, str], str] = {}  # (session, resource) -> gid
        self.inflight: set[str] = set()
        self.local_only: set[tuple[str, str]] = set()
        self.waiters: dict[str, FleetWaiter] = {}
        """This host's requests in line, by gid (``claim.list`` shows them)."""
        self.seen = Seen()
        """The newest version of each record seen: saves the read before a write."""
        self.high = 0
        """The highest fleet token this host granted or holds: the bucket's revisions
        must be above it (tokens never go back; see
        :class:`~meshd.fleet.claim_upkeep.ClaimUpkeep`)."""
        self._prefix = f"{host_token}-{secrets.token_hex(3)}-"
        self._n = 0

    def gid(self) -> str:
        """A request id no other request of any host has."""
        self._n += 1
        return f"{self._prefix}{self._n}"

    def mine(self, gid: str) -> bool:
        """Whether ``gid`` is a grant of this host, or an acquire of it in flight."""
        return gid in self.grants or gid in self.inflight

    def known(self, gid: str) -> bool:
        """Whether ``gid`` is this host's: a grant, an acquire in flight, or a wait."""
        return self.mine(gid) or gid in self.waiters

    def hold(self, grant: FleetGrant) -> None:
        """Know ``grant`` as this host's."""
        self.grants[grant.gid] = grant
        self.high = max(self.high, grant.token)
        for res in grant.keys:
            self.by_claim[(grant.session_id, res)] = grant.gid
