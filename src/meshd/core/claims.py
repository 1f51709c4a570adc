"""The lock table: advisory claims, fair queues and fencing tokens (SPEC §5).

Pure and synchronous: no I/O, no anyio, no clock of its own. Times come in as
arguments (``now_mono`` drives ttl deadlines, ``now_wall`` is what people read);
keys arrive already canonical (:func:`meshd.keys.canonical_key`).

Shape of the table:

* ``file:`` and ``repo:`` keys share ONE path trie. A node holds the claims (and
  waiters) on exactly its path plus counts of those in its subtree, so "what
  overlaps P" walks P's ancestors and then only the non-empty part of P's
  subtree: O(depth + overlaps), never O(number of claims). Every other kind is
  an exact-match slot in a dict.
* A session's claims never conflict with its ancestors' or descendants'
  (``ancestors`` callback, following ``parent``); siblings conflict as strangers.
* Waiters are strictly FIFO: a request never passes an earlier waiter it
  conflicts with, except on a key that it (or a related session) already covers
  at least as strongly -- it takes nothing from that waiter there, and making it
  queue would only deadlock it behind its own claim. A wait that would close a
  cycle of waiting sessions is refused at once (``deadlock=True``).
* One fencing token per grant, from :class:`Fencing`, which asks the store to
  persist blocks ("tokens up to N may be issued") so tokens never go back.

Every change leaves plain records in :attr:`ClaimTable.outbox` -- audit records for
the log, notices for holders and waiters, cancelled waits, the fencing block to
persist -- which the caller collects with :meth:`ClaimTable.drain` and writes or
sends. Nothing here calls back into I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from meshd.keys import Key

Mode = Literal["exclusive", "shared"]
EndHow = Literal["released", "ended", "expired", "died"]
AuditAction = Literal["grant", "refresh", "release", "expire", "lose", "steal"]
NoticeKind = Literal["granted", "expired", "stolen", "lost"]
CLEAN_ENDS = frozenset({"released", "ended"})
MAX_PREVIOUS = 10_000  # unclean ends remembered for the next grantee; oldest forgotten first


def _no_ancestors(session_id: str) -> tuple[str, ...]:
    return ()


@dataclass(frozen=True, slots=True)
class Claim:
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


@dataclass(frozen=True, slots=True)
class Previous:
    """The last holder of ``resource`` lost it without releasing it cleanly."""

    resource: str
    session_id: str
    how: str  # "ttl", "stolen", "expired", "died"
    at: float


@dataclass(frozen=True, slots=True)
class Waiting:
    """A queued request, as others see it."""

    waiter_id: str
    session_id: str
    resources: tuple[str, ...]
    mode: Mode
    since: float


@dataclass(frozen=True, slots=True)
class Granted:
    """The whole set is held. ``held_before``: resources already held in this mode."""

    session_id: str
    token: int
    claims: tuple[Claim, ...]
    already_held: bool = False
    held_before: frozenset[str] = frozenset()
    previous: tuple[Previous, ...] = ()
    stolen: tuple[Claim, ...] = ()
    waiter_id: str | None = None
    status: Literal["granted"] = "granted"


@dataclass(frozen=True, slots=True)
class Held:
    """Not granted: ``holders`` conflict with it, ``ahead`` are earlier waiters it may not pass."""

    holders: tuple[Claim, ...]
    ahead: tuple[Waiting, ...] = ()
    deadlock: bool = False
    status: Literal["held"] = "held"


@dataclass(frozen=True, slots=True)
class Queued:
    """Not granted yet: the request waits as ``waiter_id`` (see ``cancel_waiter``)."""

    waiter_id: str
    holders: tuple[Claim, ...]
    ahead: tuple[Waiting, ...] = ()
    status: Literal["queued"] = "queued"


Outcome = Granted | Held | Queued


@dataclass(frozen=True, slots=True)
class AuditRecord:
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


@dataclass(frozen=True, slots=True)
class Notice:
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


@dataclass(frozen=True, slots=True)
class Cancelled:
    """A wait ended without a grant (session ended, or the caller gave up)."""

    waiter_id: str
    session_id: str
    why: str
    held: Held


@dataclass(slots=True)
class Outbox:
    """What the caller must persist (``audit``, ``reserve_until``) and send (the rest)."""

    audit: list[AuditRecord] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    cancelled: list[Cancelled] = field(default_factory=list)
    reserve_until: int | None = None


@dataclass(frozen=True, slots=True)
class ClaimStatistics:
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


@dataclass(frozen=True, slots=True)
class _Request:
    """What one acquire asks for."""

    session_id: str
    keys: tuple[Key, ...]
    mode: Mode
    reason: str = ""
    ttl: float | None = None


@dataclass(frozen=True, slots=True)
class _Waiter:
    waiter_id: str
    seq: int
    request: _Request
    since: float

    @property
    def session_id(self) -> str:
        return self.request.session_id

    @property
    def mode(self) -> Mode:
        return self.request.mode

    def view(self) -> Waiting:
        req = self.request
        resources = tuple(k.text for k in req.keys)
        return Waiting(self.waiter_id, req.session_id, resources, req.mode, self.since)


class _Node:
    """A path in the trie (or an exact key): its own entries and subtree counts."""

    __slots__ = ("children", "claims", "n_claims", "n_waiters", "name", "parent", "waiters")

    def __init__(self, name: str, parent: _Node | None) -> None:
        self.name = name
        self.parent = parent
        self.children: dict[str, _Node] = {}
        self.claims: dict[tuple[str, str], Claim] = {}
        self.waiters: dict[tuple[str, str], _Waiter] = {}
        self.n_claims = 0
        self.n_waiters = 0


def _conflict(a: Mode, b: Mode) -> bool:
    return a == "exclusive" or b == "exclusive"


def _covers(held: Mode, wanted: Mode) -> bool:
    return held == "exclusive" or wanted == "shared"


def _above(held: Key, wanted: Key) -> bool:
    """``held`` is ``wanted`` or (path kinds) one of its ancestors."""
    if held.is_path and wanted.is_path:
        return held.parts == wanted.parts[: len(held.parts)]
    return held.text == wanted.text


class ClaimTable:
    """The live claims, waiters and fencing counter of one profile."""

    def __init__(
        self,
        *,
        ancestors: Callable[[str], tuple[str, ...]] = _no_ancestors,
        fencing: Fencing | None = None,
    ) -> None:
        self.ancestors = ancestors
        self.fencing = fencing if fencing is not None else Fencing()
        self.outbox = Outbox()
        self._root = _Node("", None)
        self._exact: dict[str, _Node] = {}
        self._nodes = 1
        self._by_session: dict[str, dict[str, Claim]] = {}
        self._by_resource: dict[str, dict[str, Claim]] = {}
        self._waiters: dict[str, _Waiter] = {}
        self._waiters_of: dict[str, dict[str, None]] = {}
        self._seq = 0
        self._heap: list[tuple[float, int, str, str]] = []
        self._previous: dict[str, Previous] = {}
        self._deferred: dict[str, Key] = {}
        self._granted_keys: list[Key] = []  # new grants can free a related waiter: see _wake

    # --- queries ----------------------------------------------------------------

    def related(self, a: str, b: str) -> bool:
        """Same session, or one is an ancestor of the other (never siblings)."""
        return a == b or b in self.ancestors(a) or a in self.ancestors(b)

    def check(self, keys: Iterable[Key], session_id: str | None = None) -> tuple[Claim, ...]:
        """Claims overlapping ``keys`` held by sessions unrelated to ``session_id``."""
        found: dict[tuple[str, str], Claim] = {}
        for key in keys:
            for claim in self._claims_over(key):
                if session_id is None or not self.related(session_id, claim.session_id):
                    found[(claim.session_id, claim.resource)] = claim
        return tuple(sorted(found.values(), key=lambda c: (c.since, c.token, c.resource)))

    def list_claims(self, session_id: str | None = None) -> tuple[Claim, ...]:
        """Every live claim, or one session's, oldest grant first."""
        if session_id is not None:
            claims: Iterable[Claim] = self._by_session.get(session_id, {}).values()
        else:
            claims = (c for mine in self._by_session.values() for c in mine.values())
        return tuple(sorted(claims, key=lambda c: (c.token, c.resource)))

    def waiting(self, session_id: str | None = None) -> tuple[Waiting, ...]:
        """Queued requests in FIFO order, or one session's."""
        return tuple(
            w.view()
            for w in self._waiters.values()
            if session_id is None or w.session_id == session_id
        )

    def validate(self, key: Key, token: int, now_mono: float | None = None) -> bool:
        """Whether ``token`` still holds ``key`` (the fencing check).

        With ``now_mono``, a claim whose ttl has run out is already invalid even if
        :meth:`expire_ttls` has not swept it yet.
        """
        for claim in self._by_resource.get(key.text, {}).values():
            if claim.token == token:
                return now_mono is None or claim.deadline is None or now_mono < claim.deadline
        return False

    def next_deadline(self) -> float | None:
        """The earliest ttl deadline (monotonic), for the sweeper's sleep; may be early."""
        while self._heap and not self._live_deadline(self._heap[0]):
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def statistics(self) -> ClaimStatistics:
        return ClaimStatistics(
            claims=self._root.n_claims + sum(n.n_claims for n in self._exact.values()),
            sessions=len(self._by_session),
            waiters=len(self._waiters),
            path_nodes=self._nodes,
            exact_keys=len(self._exact),
            ttl_heap=len(self._heap),
            last_token=self.fencing.last,
            reserve_until=self.fencing.reserve_until,
        )

    def drain(self) -> Outbox:
        """Hand over everything recorded since the last drain."""
        out, self.outbox = self.outbox, Outbox()
        return out

    # --- acquire, steal ---------------------------------------------------------

    def acquire(
        self,
        session_id: str,
        keys: Iterable[Key],
        *,
        mode: Mode = "exclusive",
        reason: str = "",
        ttl: float | None = None,
        now_mono: float,
        now_wall: float,
        wait: bool = False,
        waiter_id: str | None = None,
    ) -> Outcome:
        """Claim the whole set, all or nothing.

        Returns :class:`Granted`; or :class:`Held` (with ``deadlock`` when waiting
        would close a cycle); or, with ``wait``, :class:`Queued` -- the grant then
        arrives later as a ``granted`` notice carrying ``waiter_id``.
        """
        req = _Request(session_id, _unique(keys), mode, reason, ttl)
        if self._holds_all(req):
            return self._grant(req, now_mono, now_wall)
        holders, ahead = self._blockers(req, None)
        if not holders and not ahead:
            granted = self._grant(req, now_mono, now_wall)
            self._wake((), now_mono, now_wall)
            return granted
        held_views = tuple(w.view() for w in ahead)
        if not wait:
            return Held(tuple(holders), held_views)
        blocking = {c.session_id for c in holders} | {w.session_id for w in ahead}
        if self._reaches(blocking, session_id):
            return Held(tuple(holders), held_views, deadlock=True)
        waiter = self._enqueue(req, now_wall, waiter_id)
        return Queued(waiter.waiter_id, tuple(holders), held_views)

    def steal(
        self,
        session_id: str,
        keys: Iterable[Key],
        *,
        reason: str,
        mode: Mode = "exclusive",
        ttl: float | None = None,
        now_mono: float,
        now_wall: float,
    ) -> Granted:
        """Take the set now: conflicting claims are released (holders get ``stolen``).

        Bypasses the queue; waiters stay queued behind the new holder.
        """
        if not reason.strip():
            raise ValueError("a steal needs a reason")
        req = _Request(session_id, _unique(keys), mode, reason, ttl)
        victims, _ = self._blockers(req, -1)
        for claim in victims:
            self._drop(claim, "steal", now_wall, how="stolen", by=session_id, reason=reason)
        self._notify_losses(victims, "stolen", now_wall, how="stolen", by=session_id, reason=reason)
        granted = self._grant(req, now_mono, now_wall, how="steal")
        self._wake([c.key for c in victims], now_mono, now_wall)
        return replace(granted, stolen=tuple(victims))

    # --- release, expiry, cancel ------------------------------------------------

    def release(
        self,
        session_id: str,
        keys: Iterable[Key] | None = None,
        *,
        now_mono: float,
        now_wall: float,
    ) -> list[str]:
        """Release some (exact keys) or all of a session's claims; idempotent.

        Returns the resources released. Only exact matches: releasing ``file:/a``
        leaves a claim on ``file:/a/b`` alone.
        """
        mine = self._by_session.get(session_id, {})
        if keys is None:
            gone = list(mine.values())
        else:
            gone = [mine[k.text] for k in _unique(keys) if k.text in mine]
        for claim in gone:
            self._drop(claim, "release", now_wall, how="released")
        self._wake([c.key for c in gone], now_mono, now_wall)
        return [c.resource for c in gone]

    def release_session(
        self, session_id: str, how: EndHow, *, now_mono: float, now_wall: float
    ) -> list[str]:
        """A session ended (cleanly or not): cancel its waits, free every claim.

        ``expired``/``died`` are unclean: the holder gets a ``lost`` notice and the
        next grantee of each key sees ``previous``.
        """
        for waiter_id in list(self._waiters_of.get(session_id, {})):
            self.cancel_waiter(waiter_id, now_mono=now_mono, now_wall=now_wall, why=how, wake=False)
        gone = list(self._by_session.get(session_id, {}).values())
        action: AuditAction = "release" if how in CLEAN_ENDS else "lose"
        for claim in gone:
            self._drop(claim, action, now_wall, how=how)
        if how not in CLEAN_ENDS:
            self._notify_losses(gone, "lost", now_wall, how=how)
        self._deferred.update((c.key.text, c.key) for c in gone)
        self.wake_deferred(now_mono, now_wall)
        return [c.resource for c in gone]

    def expire_ttls(self, now_mono: float, now_wall: float) -> list[Notice]:
        """Free every claim whose ttl ran out by ``now_mono``.

        Returns the ``expired`` notices (also in the outbox; send them from there).
        """
        gone: list[Claim] = []
        while self._heap and self._heap[0][0] <= now_mono:
            entry = heapq.heappop(self._heap)
            if self._live_deadline(entry):
                claim = self._by_session[entry[2]][entry[3]]
                self._drop(claim, "expire", now_wall, how="ttl")
                gone.append(claim)
        notices = self._notify_losses(gone, "expired", now_wall, how="ttl")
        self._wake([c.key for c in gone], now_mono, now_wall)
        return notices

    def cancel_waiter(
        self,
        waiter_id: str,
        *,
        now_mono: float,
        now_wall: float,
        why: str = "cancelled",
        wake: bool = True,
    ) -> Held | None:
        """Withdraw a wait (connection closed, session ended, wait ran out).

        Returns what held it (for the ``held`` reply), or None if it was not
        waiting (already granted or cancelled). Later waiters it blocked may go.

        ``wake=False`` defers that to :meth:`wake_deferred` and skips working out
        the holders (nobody reads the reply): withdrawing W waits one by one would
        otherwise rescan the queue W times per wake, O(W^3) on the event loop.
        """
        waiter = self._waiters.get(waiter_id)
        if waiter is None:
            return None
        if wake:
            holders, ahead = self._blockers(waiter.request, waiter.seq)
            held = Held(tuple(holders), tuple(w.view() for w in ahead))
        else:
            held = Held(())
        self._unqueue(waiter)
        self.outbox.cancelled.append(Cancelled(waiter_id, waiter.session_id, why, held))
        if wake:
            self._wake(waiter.request.keys, now_mono, now_wall)
        else:
            self._deferred.update((k.text, k) for k in waiter.request.keys)
        return held

    def wake_deferred(self, now_mono: float, now_wall: float) -> None:
        """Let waiters go that withdrawals with ``wake=False`` may have unblocked."""
        if self._deferred:
            keys = list(self._deferred.values())
            self._deferred.clear()
            self._wake(keys, now_mono, now_wall)

    def restore(
        self,
        session_id: str,
        key: Key,
        *,
        mode: Mode,
        token: int,
        reason: str,
        since: float,
        ttl_left: float | None,
        now_mono: float,
    ) -> None:
        """Put back a claim the store kept across a restart (no audit, no token issued)."""
        deadline = None if ttl_left is None else now_mono + max(ttl_left, 0.0)
        self._put(Claim(session_id, key, mode, token, reason, since, ttl_left, deadline))

    # --- internals: grant and drop ----------------------------------------------

    def _holds_all(self, req: _Request) -> bool:
        mine = self._by_session.get(req.session_id, {})
        return all(k.text in mine and mine[k.text].mode == req.mode for k in req.keys)

    def _grant(
        self,
        req: _Request,
        now_mono: float,
        now_wall: float,
        *,
        how: str = "",
        waiter_id: str | None = None,
    ) -> Granted:
        """Record the whole set as held; keys already held in this mode keep their token."""
        mine = dict(self._by_session.get(req.session_id, {}))
        kept = frozenset(
            k.text for k in req.keys if k.text in mine and mine[k.text].mode == req.mode
        )
        token = self._issue() if len(kept) < len(req.keys) else mine[req.keys[0].text].token
        deadline = None if req.ttl is None else now_mono + req.ttl
        claims, previous = [], []
        for key in req.keys:
            old = mine.get(key.text)
            if old is not None and key.text in kept:
                claim = replace(
                    old, reason=req.reason or old.reason, ttl=req.ttl, deadline=deadline
                )
            else:
                claim = Claim(
                    req.session_id, key, req.mode, token, req.reason, now_wall, req.ttl, deadline
                )
                if (prev := self._previous.pop(key.text, None)) is not None:
                    previous.append(prev)
            if old is not None:
                self._unput(old)
            if key.text not in kept:
                self._granted_keys.append(key)
            self._put(claim)
            self._audit(claim, "refresh" if key.text in kept else "grant", now_wall, how=how)
            claims.append(claim)
        return Granted(
            req.session_id,
            token,
            tuple(claims),
            already_held=len(kept) == len(req.keys),
            held_before=kept,
            previous=tuple(previous),
            waiter_id=waiter_id,
        )

    def _issue(self) -> int:
        before = self.fencing.reserve_until
        token = self.fencing.next()
        if self.fencing.reserve_until != before:
            self.outbox.reserve_until = self.fencing.reserve_until
        return token

    def _drop(
        self,
        claim: Claim,
        action: AuditAction,
        now_wall: float,
        *,
        how: str,
        by: str | None = None,
        reason: str = "",
    ) -> None:
        """Remove a claim, log it, and remember an unclean end for the next grantee."""
        self._unput(claim)
        self._audit(claim, action, now_wall, how=how, by=by, reason=reason or claim.reason)
        self._previous.pop(claim.resource, None)
        if how in CLEAN_ENDS:
            return
        self._previous[claim.resource] = Previous(claim.resource, claim.session_id, how, now_wall)
        if len(self._previous) > MAX_PREVIOUS:
            del self._previous[next(iter(self._previous))]

    def _audit(
        self,
        claim: Claim,
        action: AuditAction,
        now_wall: float,
        *,
        how: str = "",
        by: str | None = None,
        reason: str | None = None,
    ) -> None:
        why = claim.reason if reason is None else reason
        self.outbox.audit.append(
            AuditRecord(
                now_wall, action, claim.session_id, claim.resource, claim.mode, claim.token,
                why, how, by, claim.ttl,
            )
        )  # fmt: skip

    def _notify_losses(
        self,
        claims: Iterable[Claim],
        kind: NoticeKind,
        now_wall: float,
        *,
        how: str,
        by: str | None = None,
        reason: str = "",
    ) -> list[Notice]:
        """One notice per holder and grant (token) that lost claims."""
        groups: dict[tuple[str, int], list[str]] = {}
        for claim in claims:
            groups.setdefault((claim.session_id, claim.token), []).append(claim.resource)
        notices = [
            Notice(kind, sid, tuple(res), token, now_wall, how=how, by=by, reason=reason)
            for (sid, token), res in groups.items()
        ]
        self.outbox.notices.extend(notices)
        return notices

    # --- internals: waiters -----------------------------------------------------

    def _enqueue(self, req: _Request, now_wall: float, waiter_id: str | None) -> _Waiter:
        self._seq += 1
        wid = waiter_id if waiter_id is not None else f"w{self._seq}"
        if wid in self._waiters:
            raise ValueError(f"waiter id {wid!r} is already waiting")
        waiter = _Waiter(wid, self._seq, req, now_wall)
        self._waiters[wid] = waiter
        self._waiters_of.setdefault(req.session_id, {})[wid] = None
        for key in req.keys:
            node = self._ensure(key)
            node.waiters[(wid, key.text)] = waiter
            self._count(node, 0, 1)
        return waiter

    def _unqueue(self, waiter: _Waiter) -> None:
        del self._waiters[waiter.waiter_id]
        mine = self._waiters_of[waiter.session_id]
        del mine[waiter.waiter_id]
        if not mine:
            del self._waiters_of[waiter.session_id]
        for key in waiter.request.keys:
            node = self._ensure(key)
            del node.waiters[(waiter.waiter_id, key.text)]
            self._count(node, 0, -1)

    def _wake(self, keys: Iterable[Key], now_mono: float, now_wall: float) -> None:
        """Grant, in FIFO order, the waiters overlapping ``keys`` that can now go.

        Freed keys are looked at first; then the keys of every grant made meanwhile,
        because a new claim can free a waiter of a related session (its parent's
        claim now covers the key, so the waiters ahead no longer count) and a
        downgrade to shared can let readers in. Each pass grants or stops.
        """
        pending = [*keys, *self._granted_keys]
        self._granted_keys.clear()
        while pending and self._waiters:
            self._wake_pass(pending, now_mono, now_wall)
            pending = list(self._granted_keys)
            self._granted_keys.clear()
        self._granted_keys.clear()

    def _wake_pass(self, keys: Iterable[Key], now_mono: float, now_wall: float) -> None:
        candidates: dict[str, _Waiter] = {}
        for key in keys:
            for waiter in self._waiters_over(key):
                candidates[waiter.waiter_id] = waiter
        for waiter in sorted(candidates.values(), key=lambda w: w.seq):
            if waiter.waiter_id not in self._waiters:
                continue
            holders, ahead = self._blockers(waiter.request, waiter.seq)
            if holders or ahead:
                continue
            self._unqueue(waiter)
            granted = self._grant(
                waiter.request, now_mono, now_wall, how="wait", waiter_id=waiter.waiter_id
            )
            resources = tuple(c.resource for c in granted.claims)
            self.outbox.notices.append(
                Notice(
                    "granted", waiter.session_id, resources, granted.token, now_wall,
                    reason=waiter.request.reason, waiter_id=waiter.waiter_id, granted=granted,
                )
            )  # fmt: skip

    def _blockers(self, req: _Request, seq: int | None) -> tuple[list[Claim], list[_Waiter]]:
        """Conflicting claims, and earlier conflicting waiters (``seq`` None: all; -1: none).

        Waiters are not counted on a key the session (or a related one) already
        covers at least as strongly: it takes nothing from them there.
        """
        holders: dict[tuple[str, str], Claim] = {}
        ahead: dict[str, _Waiter] = {}
        for key in req.keys:
            covered = False
            for claim in self._claims_over(key):
                if self.related(req.session_id, claim.session_id):
                    covered = covered or (_above(claim.key, key) and _covers(claim.mode, req.mode))
                elif _conflict(req.mode, claim.mode):
                    holders[(claim.session_id, claim.resource)] = claim
            if covered or seq == -1 or not self._waiters:
                continue
            for waiter in self._waiters_over(key):
                if (
                    (seq is None or waiter.seq < seq)
                    and _conflict(req.mode, waiter.mode)
                    and not self.related(req.session_id, waiter.session_id)
                ):
                    ahead[waiter.waiter_id] = waiter
        return list(holders.values()), sorted(ahead.values(), key=lambda w: w.seq)

    def _reaches(self, start: set[str], target: str) -> bool:
        """Whether waiting on ``start`` would close a cycle back to ``target``."""
        seen: set[str] = set()
        stack = list(start)
        while stack:
            sid = stack.pop()
            if sid == target:
                return True
            if sid in seen:
                continue
            seen.add(sid)
            for wid in self._waiters_of.get(sid, {}):
                holders, ahead = self._blockers(self._waiters[wid].request, self._waiters[wid].seq)
                stack.extend(c.session_id for c in holders)
                stack.extend(w.session_id for w in ahead)
        return False

    def _live_deadline(self, entry: tuple[float, int, str, str]) -> bool:
        claim = self._by_session.get(entry[2], {}).get(entry[3])
        return claim is not None and claim.deadline == entry[0] and claim.token == entry[1]

    # --- internals: the trie ----------------------------------------------------

    def _put(self, claim: Claim) -> None:
        self._by_session.setdefault(claim.session_id, {})[claim.resource] = claim
        self._by_resource.setdefault(claim.resource, {})[claim.session_id] = claim
        node = self._ensure(claim.key)
        node.claims[(claim.session_id, claim.resource)] = claim
        self._count(node, 1, 0)
        if claim.deadline is not None:
            entry = (claim.deadline, claim.token, claim.session_id, claim.resource)
            heapq.heappush(self._heap, entry)

    def _unput(self, claim: Claim) -> None:
        mine = self._by_session[claim.session_id]
        del mine[claim.resource]
        if not mine:
            del self._by_session[claim.session_id]
        holders = self._by_resource[claim.resource]
        del holders[claim.session_id]
        if not holders:
            del self._by_resource[claim.resource]
        node = self._ensure(claim.key)
        del node.claims[(claim.session_id, claim.resource)]
        self._count(node, -1, 0)

    def _ensure(self, key: Key) -> _Node:
        """The node for ``key``, created (with its path) if missing."""
        if not key.is_path:
            exact = self._exact.get(key.text)
            if exact is None:
                exact = self._exact[key.text] = _Node(key.text, None)
            return exact
        node = self._root
        for part in key.parts:
            child = node.children.get(part)
            if child is None:
                child = node.children[part] = _Node(part, node)
                self._nodes += 1
            node = child
        return node

    def _count(self, node: _Node, claims: int, waiters: int) -> None:
        """Adjust subtree counts from ``node`` up, pruning nodes left empty."""
        current: _Node | None = node
        while current is not None:
            current.n_claims += claims
            current.n_waiters += waiters
            parent = current.parent
            if current.n_claims == 0 and current.n_waiters == 0:
                if parent is not None:
                    del parent.children[current.name]
                    self._nodes -= 1
                elif current is not self._root:
                    del self._exact[current.name]
            current = parent

    def _claims_over(self, key: Key) -> Iterator[Claim]:
        """Claims on ``key``, on its ancestors and in its subtree."""
        for node in self._overlap_nodes(key, waiters=False):
            yield from node.claims.values()

    def _waiters_over(self, key: Key) -> Iterator[_Waiter]:
        """Waiters wanting ``key``, an ancestor of it or something under it."""
        for node in self._overlap_nodes(key, waiters=True):
            yield from node.waiters.values()

    def _overlap_nodes(self, key: Key, *, waiters: bool) -> Iterator[_Node]:
        """``key``'s ancestors, then the non-empty part of its subtree: O(depth + hits)."""
        if not key.is_path:
            exact = self._exact.get(key.text)
            if exact is not None:
                yield exact
            return
        node = self._root
        for part in key.parts:
            yield node
            child = node.children.get(part)
            if child is None:
                return
            node = child
        stack = [node]
        while stack:
            current = stack.pop()
            yield current
            stack.extend(
                c for c in current.children.values() if (c.n_waiters if waiters else c.n_claims)
            )


def _unique(keys: Iterable[Key]) -> tuple[Key, ...]:
    """The set's keys in the caller's order, duplicates dropped."""
    seen: dict[str, Key] = {}
    for key in keys:
        seen.setdefault(key.text, key)
    if not seen:
        raise ValueError("a claim needs at least one key")
    return tuple(seen.values())
