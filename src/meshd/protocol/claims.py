"""Params and results of ``claim.*`` and ``audit.log`` (SPEC §5, §9).

Resources travel as the user typed them; the daemon canonicalises them and
answers with canonical keys. Times in results are RFC 3339 strings, like the
rest of the wire. Names are prefixed (``Claim…``, ``Audit…``) because
``mesh.schema`` puts every struct in one ``$defs`` table.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from meshd.protocol.events import ClaimLoss
from meshd.protocol.methods import MethodSpec, Params, Result, Seconds, SessionId

Mode = Literal["exclusive", "shared"]
#: What an audit row records (``audit.log``; the core's records and the store use it too).
AuditAction = Literal[
    "grant",
    "refresh",
    "release",
    "expire",
    "lose",
    "steal",
    "preempt",
    "pause",
    "resume",
    "rank",
]
Resource = Annotated[str, Meta(max_length=4096)]
"""A key as typed; the empty key is the daemon's to refuse, with ``BAD_KEY`` (SPEC §5)."""
Resources = Annotated[list[Resource], Meta(min_length=1, max_length=256)]
REASON_MAX = 200
Reason = Annotated[str, Meta(max_length=REASON_MAX)]
WaitSeconds = Annotated[float, Meta(ge=0)]
"""Capped to ``max_query_timeout`` by the daemon, never refused for being long (SPEC §2)."""


class ClaimAcquireParams(Params):
    """Claim a whole set, all or nothing. ``wait`` > 0 queues (FIFO) and replies once."""

    session_id: SessionId
    resources: Resources
    mode: Mode = "exclusive"
    reason: Reason = ""
    ttl: Seconds | None = None
    wait: WaitSeconds = 0.0
    broad: bool = False


class ClaimPrevious(Result):
    """The last holder of ``resource`` did not release it cleanly (ttl, stolen, expired, died)."""

    resource: str
    session_id: str
    how: str
    at: str


class ClaimGrant(Result):
    """One granted key. ``already_held``: it was held before this call (do not release it)."""

    resource: str
    mode: Mode
    token: int
    already_held: bool = False
    previous: ClaimPrevious | None = None
    local_only: bool = False
    """A fleet-wide key granted here alone while the fleet was out of reach
    (``on_partition = "local"``): reconciled when the link returns (SPEC §12)."""


class ClaimHolder(Result):
    """A claim in the way, with the holder's task for the human warning."""

    session_id: str
    resource: str
    task: str
    since: str
    reason: str
    mode: Mode = "exclusive"
    profile: str = ""
    branch: str | None = None
    host: str | None = None  # the holding host of a fleet-wide claim, this one too (SPEC §12)


class ClaimWaiting(Result):
    """An earlier waiter a request may not pass (strict FIFO)."""

    session_id: str
    resources: list[str]
    mode: Mode
    since: str


class ClaimAcquireResult(Result):
    """``granted`` (``token``, ``already_held``, ``previous``) or ``held`` (``holders``)."""

    status: Literal["granted", "held"]
    claims: list[ClaimGrant] = []
    holders: list[ClaimHolder] = []
    token: int | None = None
    already_held: bool = False
    previous: ClaimPrevious | None = None
    deadlock: bool = False
    ahead: list[ClaimWaiting] = []  # the first 20 waiters it may not pass; more_ahead: and others
    more_ahead: bool = False
    stolen: list[ClaimHolder] = []
    waited_s: float = 0.0
    disabled: bool = False
    withdrawn: str = ""
    """``held`` before its wait ran out: the wait was withdrawn, ``paused`` (its session
    paused, SPEC §5b) or how its session ended (``ended``, ``expired``, ``died``)."""
    local_only: bool = False
    """Granted here alone while the fleet was out of reach (its fleet-wide keys are
    marked ``local_only`` in ``claims`` too; SPEC §12)."""
    lost: list[ClaimLoss] = []
    """The session's claims lost meanwhile (ttl, steal, expiry) whose inbox notice is
    still unread, oldest first: a holder that was not listening learns of them at its
    next claim (SPEC §5), until it reads them (``message.ack``)."""


class ClaimStealParams(Params):
    """Take the set now: conflicting claims are released, their holders told. Logged."""

    session_id: SessionId
    resources: Resources
    reason: Annotated[str, Meta(min_length=1, max_length=200)]
    mode: Mode = "exclusive"
    ttl: Seconds | None = None
    broad: bool = False


class ClaimReleaseParams(Params):
    """Release the named claims (exact keys), or every claim when ``resources`` is absent."""

    session_id: SessionId
    resources: Annotated[list[Resource], Meta(max_length=256)] | None = None


class ClaimReleaseResult(Result):
    released: list[str] = []
    disabled: bool = False


class ClaimCheckParams(Params):
    """Who else is on these keys or this path? ``session_id`` leaves out the caller's family.

    A daemon answers for its own profile only: ``meshctl check --all-profiles`` asks
    each visible profile's daemon itself, passing ``for_profile`` so each can say
    whether the caller may see it (there is no ``all_profiles`` param).
    """

    resources: Resources
    session_id: SessionId | None = None
    broad: bool = True
    for_profile: str | None = None


class ClaimPresent(Result):
    """A live session whose cwd, repo/branch or recently changed files contain the path.
    In ``claim.check``'s ``present``, the sessions that recently changed a file come
    first (``why: "changed"``), then those working around it."""

    session_id: str
    task: str
    why: Literal["cwd", "repo", "branch", "changed"]
    path: str
    branch: str | None = None
    since: str = ""
    host: str | None = None  # a session of another host at a fleet-wide path (SPEC §12)


class ClaimCheckResult(Result):
    """``held`` only for (a) overlapping claims; ``present`` and ``elsewhere`` are warnings."""

    status: Literal["free", "held"]
    claims: list[ClaimHolder] = []
    present: list[ClaimPresent] = []
    elsewhere: list[ClaimHolder] = []
    warnings: list[str] = []
    disabled: bool = False
    profile: str = ""
    visible: bool = True
    fleet_unreachable: str = ""
    """Why the other hosts' claims on these fleet-wide keys could not be read (the
    fleet cannot be reached): the answer is this host's table alone. Empty when the
    fleet was read, or no key is fleet-wide (SPEC §12)."""


class ClaimListParams(Params):
    """Live claims: every session's, or one session's."""

    session_id: SessionId | None = None


class ClaimRecord(Result):
    session_id: str
    resource: str
    mode: Mode
    token: int
    since: str
    reason: str = ""
    expires_in_s: float | None = None
    local_only: bool = False  # fleet-wide key granted while the fleet was out of reach
    host: str | None = None  # the holding host of a fleet-wide claim, this one too (SPEC §12)


class ClaimListResult(Result):
    claims: list[ClaimRecord] = []
    waiting: list[ClaimWaiting] = []


class ClaimValidateParams(Params):
    """Is ``token`` still the holder's token for ``resource``? (the fencing check)"""

    resource: Resource
    token: int


class ClaimValidateResult(Result):
    valid: bool
    resource: str
    session_id: str | None = None
    host: str | None = None  # fleet-wide keys: the holder's host


class AuditLogParams(Params):
    """The audit log, newest last. ``since``: RFC 3339 time; filters are exact."""

    since: str | None = None
    session_id: SessionId | None = None
    resource: Resource | None = None
    limit: Annotated[int, Meta(ge=1, le=10_000)] = 200


class AuditEntry(Result):
    """One grant, refresh, release, expire, lose or steal; or, naming no claim (token
    0, no resource for ``rank`` and ``resume``), a rank set, a preemption, a pause or
    a resume (SPEC §5b: "All of it is in the audit log")."""

    at: str
    action: AuditAction
    session_id: str
    resource: str
    mode: Mode
    token: int
    reason: str = ""
    how: str = ""
    by: str | None = None


class AuditLogResult(Result):
    entries: list[AuditEntry] = []


CLAIM_METHODS: list[MethodSpec] = [
    MethodSpec("claim.acquire", ClaimAcquireParams, ClaimAcquireResult, "Claim a set."),
    MethodSpec("claim.release", ClaimReleaseParams, ClaimReleaseResult, "Release (idempotent)."),
    MethodSpec("claim.check", ClaimCheckParams, ClaimCheckResult, "Who else is here?"),
    MethodSpec("claim.list", ClaimListParams, ClaimListResult, "Live claims and waiters."),
    MethodSpec("claim.validate", ClaimValidateParams, ClaimValidateResult, "Fencing check."),
    MethodSpec("claim.steal", ClaimStealParams, ClaimAcquireResult, "Take a set now (logged)."),
    MethodSpec("audit.log", AuditLogParams, AuditLogResult, "Grants, releases, losses."),
]
