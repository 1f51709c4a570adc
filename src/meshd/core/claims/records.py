"""The lock table's records: what it holds, answers and leaves in its outbox (SPEC §5).

Plain immutable values, apart from the :class:`Outbox` being filled, the
:class:`Fencing` counter and a paused session's :class:`Reservation`. Split from
:mod:`meshd.core.claims.table` (the table) so the records can be read, imported and
tested without the table's machinery.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

import msgspec

from meshd.protocol.claims import AuditAction, Mode

if TYPE_CHECKING:
    from meshd.keys import Key

EndHow = Literal["released", "ended", "expired", "died"]
#: Actions that end the claim they name (the store deletes its row); the last four
#: only note what was asked or done (SPEC §5b: a rank set, a preemption asked, a
#: pause, a resume) and name no claim.
ENDING = frozenset({"release", "expire", "lose", "steal"})
NoticeKind = Literal["granted", "released", "expired", "stolen", "lost"]
#: Ends that leave the next grantee no ``previous``: a release, an end, and SPEC §5b's
#: checkpoint (a pause, and the reserved set dropped when its session resumes or ends).
CLEAN_ENDS = frozenset({"released", "ended", "paused", "unreserved"})
MAX_PREVIOUS = 10_000  # unclean ends remembered for the next grantee; oldest forgotten first
MAX_AHEAD = 20  # earlier waiters named in a held reply; a queue of 10,000 is not listed in full


class Claim(msgspec.Struct, frozen=True):
    """One session's claim on one key. ``since`` is wall time; ``deadline`` monotonic."""

    session_id: str
    key: Key
    mode: Mode
    token: int
    reason: str
    since: float
    ttl: float | None = None
    deadline: float | None = None

    @property
    def resource(self) -> str:
        return self.key.text


class Previous(msgspec.Struct, frozen=True):
    """The last holder of ``resource`` lost it without releasing it cleanly."""

    resource: str
    session_id: str
    how: str  # "ttl", "stolen", "expired", "died"
    at: float


class Waiting(msgspec.Struct, frozen=True):
    """A queued request, as others see it."""

    waiter_id: str
    session_id: str
    resources: tuple[str, ...]
    mode: Mode
    since: float
    rank: int = 0


class Granted(msgspec.Struct, frozen=True):
    """The whole set is held. ``held_before``: resources already held in this mode;
    ``refreshed``: those claims as they were before this grant refreshed them (their
    ttl and reason), put back if the grant's commit is refused."""

    session_id: str
    token: int
    claims: tuple[Claim, ...]
    already_held: bool = False
    held_before: frozenset[str] = frozenset()
    refreshed: tuple[Claim, ...] = ()
    previous: tuple[Previous, ...] = ()
    stolen: tuple[Claim, ...] = ()
    waiter_id: str | None = None
    status: Literal["granted"] = "granted"


class Held(msgspec.Struct, frozen=True):
    """Not granted: ``holders`` conflict with it, ``ahead`` are earlier waiters it may not pass.

    ``ahead`` names at most :data:`MAX_AHEAD` of them, first served first;
    ``more_ahead`` says the queue went on beyond that.
    """

    holders: tuple[Claim, ...]
    ahead: tuple[Waiting, ...] = ()
    deadlock: bool = False
    more_ahead: bool = False
    status: Literal["held"] = "held"


class Queued(msgspec.Struct, frozen=True):
    """Not granted yet: the request waits as ``waiter_id`` (see ``cancel_waiter``).

    It does not name what it waits for: nobody asked (a wait is answered when it is
    granted or runs out, and ``claim.list`` shows the line), and finding every
    conflicting claim again cost each queued request a fifth of its time in the table."""

    waiter_id: str
    status: Literal["queued"] = "queued"


Outcome = Granted | Held | Queued


class AuditRecord(msgspec.Struct, frozen=True):
    """One line of the audit log, per resource."""

    at: float
    action: AuditAction
    session_id: str
    resource: str
    mode: Mode
    token: int
    reason: str = ""
    how: str = ""
    by: str | None = None
    ttl: float | None = None


class Notice(msgspec.Struct, frozen=True):
    """Something to tell ``session_id``: a claim it lost, or a wait that was granted."""

    kind: NoticeKind
    session_id: str
    resources: tuple[str, ...]
    token: int
    at: float
    how: str = ""
    by: str | None = None
    reason: str = ""
    waiter_id: str | None = None
    granted: Granted | None = None


class Cancelled(msgspec.Struct, frozen=True):
    """A wait ended without a grant (session ended, or the caller gave up)."""

    waiter_id: str
    session_id: str
    why: str
    held: Held


class Outbox(msgspec.Struct):
    """What the caller must persist (``audit``, ``reserve_until``) and send (the rest)."""

    audit: list[AuditRecord] = msgspec.field(default_factory=list)
    notices: list[Notice] = msgspec.field(default_factory=list)
    cancelled: list[Cancelled] = msgspec.field(default_factory=list)
    reserve_until: int | None = None

    def empty(self) -> bool:
        """Nothing to store or send (every field above is checked: keep it so)."""
        return not (self.audit or self.notices or self.cancelled) and self.reserve_until is None

    def audit_claim(
        self,
        claim: Claim,
        action: AuditAction,
        at: float,
        *,
        how: str = "",
        by: str | None = None,
        reason: str | None = None,
    ) -> None:
        """Log one change to ``claim`` (``reason`` None: the claim's own)."""
        why = claim.reason if reason is None else reason
        self.audit.append(
            AuditRecord(
                at, action, claim.session_id, claim.resource, claim.mode, claim.token,
                why, how, by, claim.ttl,
            )
        )  # fmt: skip

    def losses(
        self,
        claims: Iterable[Claim],
        kind: NoticeKind,
        at: float,
        *,
        how: str,
        by: str | None = None,
        reason: str = "",
    ) -> list[Notice]:
        """One notice per holder and grant (token) that lost claims; returns them."""
        groups: dict[tuple[str, int], list[str]] = {}
        for claim in claims:
            groups.setdefault((claim.session_id, claim.token), []).append(claim.resource)
        notices = [
            Notice(kind, sid, tuple(res), token, at, how=how, by=by, reason=reason)
            for (sid, token), res in groups.items()
        ]
        self.notices.extend(notices)
        return notices


RESERVED = "reserved:"  # a reserved set is held by the pseudo-session "reserved:<owner>"
#: The ``how`` of the release row of a claim a mode change replaced (its key stays held).
MODE_CHANGE = "mode change"
#: The ``how`` of a ``stolen`` notice told to a paused session: the key was in its reserved set.
RESERVED_HOW = "reserved"


class Reservation(msgspec.Struct):
    """What a paused session released (SPEC §5b), held for whom may pass it:
    the preemptors in ``first`` until each has been served (granted on the set, then
    released), then only the owner."""

    owner: str
    keys: tuple[Key, ...]
    mode: Mode
    first: set[str]
    reason: str = ""
    """What the paused claims were taken for (their distinct reasons, in order), given
    back to them on resume: a claim taken with no reason has none after it either."""
    taken: set[str] = msgspec.field(default_factory=set)
    """The preemptors of ``first`` granted on the set: each keeps its turn (it may take
    the rest of the set a key at a time) until it holds none of the set any more."""

    @property
    def holder(self) -> str:
        return RESERVED + self.owner

    def admits(self, session_id: str) -> bool:
        return session_id in self.first if self.first else session_id == self.owner


class ClaimStatistics(msgspec.Struct, frozen=True):
    claims: int
    sessions: int
    waiters: int
    path_nodes: int
    exact_keys: int
    ttl_heap: int
    last_token: int
    reserve_until: int


class Fencing:
    """A token counter that only grows, across restarts.

    The store persists ``reserve_until`` ("tokens up to N may have been issued")
    before any token above the previous block is acknowledged; at start the
    counter resumes from the persisted value, skipping what the block left unused.
    """

    __slots__ = ("block", "last", "reserve_until")

    def __init__(self, reserved: int = 0, block: int = 4096) -> None:
        self.last = reserved
        self.reserve_until = reserved
        self.block = block

    def next(self) -> int:
        """The next token. May raise ``reserve_until``: the caller persists it."""
        self.last += 1
        if self.last > self.reserve_until:
            self.reserve_until = self.last + self.block - 1
        return self.last
