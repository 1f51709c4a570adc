"""Random interleavings against the lock table's promises (SPEC §5).

Sessions s0..s5 (s1 and s4 children of s0, s3 a child of s1; s2 and s5 strangers)
acquire, wait, release, expire, steal, cancel and die in random order. After every
step a brute-force oracle (pairwise ``Key.overlaps``, no trie) checks that:

* no two unrelated sessions hold overlapping keys with an exclusive among them;
* no waiter is left waiting that nothing blocks (release wakes the queue);
* no grant passes a still-waiting request it conflicts with that is served
  before it: of a higher rank, or of the same rank and earlier (SPEC §5b);
  ranks change mid-wait;
* a cancelled waiter is never granted;
* every new token is larger than every earlier one; live claims validate, lost ones don't.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshd.core.claims.records import Claim, Granted, Queued, Waiting
from meshd.core.claims.table import ClaimTable
from meshd.core.clock import ManualClock
from meshd.keys import Key, from_canonical

PARENTS = {"s1": "s0", "s3": "s1", "s4": "s0"}
SESSIONS = ["s0", "s1", "s2", "s3", "s4", "s5"]
KEYS = [
    "file:/a",
    "file:/a/b",
    "file:/a/b/c",
    "file:/a/d",
    "repo:/a/b",
    "file:/e",
    "port:1",
    "port:2",
]


def ancestors(session_id: str) -> tuple[str, ...]:
    chain = []
    while session_id in PARENTS:
        session_id = PARENTS[session_id]
        chain.append(session_id)
    return tuple(chain)


def related(a: str, b: str) -> bool:
    return a == b or a in ancestors(b) or b in ancestors(a)


def clash(mode_a: str, mode_b: str) -> bool:
    return "exclusive" in (mode_a, mode_b)


def above(held: Key, wanted: Key) -> bool:
    if held.is_path and wanted.is_path:
        return held.parts == wanted.parts[: len(held.parts)]
    return held == wanted


sessions = st.sampled_from(SESSIONS)
key_sets = st.lists(st.sampled_from(KEYS), min_size=1, max_size=3)
modes = st.sampled_from(["exclusive", "shared"])
acquire = st.tuples(
    st.just("acquire"), sessions, key_sets, modes, st.booleans(), st.sampled_from([None, 3, 7])
)
ops = st.one_of(
    acquire,
    acquire,  # weighted: most steps claim, so queues and conflicts build up
    acquire,
    st.tuples(st.just("release"), sessions, st.none() | key_sets),
    st.tuples(st.just("advance"), st.sampled_from([1, 3, 8])),
    st.tuples(st.just("steal"), sessions, key_sets, modes),
    st.tuples(st.just("cancel"), st.integers(0, 5)),
    st.tuples(st.just("end"), sessions, st.sampled_from(["ended", "died", "expired"])),
    st.tuples(st.just("rank"), sessions, st.sampled_from([-1, 0, 1, 2])),
)


@dataclass
class World:
    clock: ManualClock = field(default_factory=ManualClock)
    ranks: dict[str, int] = field(default_factory=dict)
    table: ClaimTable = field(init=False)
    max_token: int = 0
    cancelled: set[str] = field(default_factory=set)
    lost: set[tuple[str, int]] = field(default_factory=set)
    next_waiter: int = 0

    def __post_init__(self) -> None:
        self.table = ClaimTable(self.clock, ancestors=ancestors, rank_of=self.rank)

    def rank(self, session_id: str) -> int:
        return self.ranks.get(session_id, 0)

    def step(self, op: tuple[Any, ...]) -> list[Granted]:
        """Run one operation; return every grant it made (direct or woken)."""
        t, grants = self.table, []
        if op[0] == "acquire":
            _, sid, raw, mode, wait, ttl = op
            self.next_waiter += 1
            wid = f"w{self.next_waiter}"
            keys = [from_canonical(x) for x in raw]
            out = t.acquire(sid, keys, mode=mode, ttl=ttl, wait=wait, waiter_id=wid)
            if isinstance(out, Granted):
                grants.append(out)
            if isinstance(out, Queued):
                assert out.waiter_id == wid
        elif op[0] == "release":
            freed = None if op[2] is None else [from_canonical(x) for x in op[2]]
            t.release(op[1], freed)
        elif op[0] == "advance":
            self.clock.advance(op[1])
            t.expire_ttls()
        elif op[0] == "steal":
            keys = [from_canonical(x) for x in op[2]]
            grants.append(t.steal(op[1], keys, reason="test", mode=op[3]))
        elif op[0] == "cancel":
            queued = t.waiting()
            if queued:
                wid = queued[op[1] % len(queued)].waiter_id
                self.cancelled.add(wid)
                t.cancel_waiter(wid)
        elif op[0] == "rank":
            self.ranks[op[1]] = op[2]
            t.rerank(op[1])
        else:
            t.release_session(op[1], op[2])
        return self.collect(grants)

    def collect(self, grants: list[Granted]) -> list[Granted]:
        """Add the grants woken waiters got to ``grants``; remember lost tokens."""
        for notice in self.table.drain().notices:
            if notice.kind == "granted":
                assert notice.waiter_id not in self.cancelled, "a cancelled waiter was granted"
                assert notice.granted is not None
                grants.append(notice.granted)
            else:
                self.lost.update((r, notice.token) for r in notice.resources)
        return grants


def assert_no_conflicting_holders(claims: tuple[Claim, ...]) -> None:
    for i, a in enumerate(claims):
        for b in claims[i + 1 :]:
            if a.key.overlaps(b.key) and not related(a.session_id, b.session_id):
                assert not clash(a.mode, b.mode), f"{a} and {b} conflict"


def blocked_by_claims(sid: str, keys: list[Key], mode: str, claims: tuple[Claim, ...]) -> bool:
    return any(
        k.overlaps(c.key) and not related(sid, c.session_id) and clash(mode, c.mode)
        for k in keys
        for c in claims
    )


def passes(sid: str, keys: list[Key], mode: str, earlier: Waiting, cover: list[Claim]) -> bool:
    """Whether granting (sid, keys, mode) gets ahead of the earlier waiter."""
    if related(sid, earlier.session_id) or not clash(mode, earlier.mode):
        return False
    theirs = [from_canonical(r) for r in earlier.resources]
    for key in keys:
        covered = any(
            related(sid, c.session_id)
            and above(c.key, key)
            and (c.mode == "exclusive" or mode == "shared")
            for c in cover
        )
        if not covered and any(key.overlaps(x) for x in theirs):
            return True
    return False


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=20, max_size=80))
def test_random_interleavings_keep_every_promise(steps: list[tuple[Any, ...]]) -> None:
    """40 random interleavings, in every run (the 300 of the next test are slow)."""
    keep_every_promise(steps)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=20, max_size=80))
def test_many_random_interleavings_keep_every_promise(steps: list[tuple[Any, ...]]) -> None:
    keep_every_promise(steps)


def keep_every_promise(steps: list[tuple[Any, ...]]) -> None:
    """No conflicting holders, FIFO kept, cancelled never granted, tokens only grow."""
    world = World()
    for op in steps:
        before = world.table.list_claims()
        queued_before = world.table.waiting()
        grants = world.step(op)
        after = world.table.list_claims()
        queued = world.table.waiting()

        assert_no_conflicting_holders(after)
        # tokens: every grant that took a token took a larger one than all before
        fresh = sorted({g.token for g in grants if not g.already_held})
        assert all(tok > world.max_token for tok in fresh), (fresh, world.max_token)
        world.max_token = max([world.max_token, *fresh])
        assert all(c.token <= world.table.fencing.last for c in after)
        # fencing: live claims validate, lost ones never do again
        for c in after:
            assert world.table.validate(c.key, c.token)
        for resource, token in world.lost:
            assert not world.table.validate(from_canonical(resource), token)
        # the queue is in serving order and knows every rank
        assert [w.rank for w in queued] == [world.rank(w.session_id) for w in queued]
        assert queued == tuple(sorted(queued, key=lambda w: (-w.rank, arrival(w.waiter_id))))
        # liveness: every waiter left is blocked by a claim or one served before it
        for i, w in enumerate(queued):
            keys = [from_canonical(r) for r in w.resources]
            assert blocked_by_claims(w.session_id, keys, w.mode, after) or any(
                passes(w.session_id, keys, w.mode, e, list(after)) for e in queued[:i]
            ), f"waiter {w} left waiting with nothing in its way"
        # FIFO: no grant passed an earlier request that is still waiting
        still = {w.waiter_id for w in queued}
        for g in grants:
            if g.already_held:
                continue  # a refresh takes nothing from anyone
            rank = world.rank(g.session_id)
            if g.waiter_id is not None:
                mine = (-rank, arrival(g.waiter_id))
                earlier = [w for w in queued if (-w.rank, arrival(w.waiter_id)) < mine]
            elif op[0] == "steal":
                continue  # a steal bypasses the queue by design
            else:
                earlier = [w for w in queued_before if w.waiter_id in still and w.rank >= rank]
            keys = [c.key for c in g.claims]
            made = [c for other in grants for c in other.claims]  # incl. claims gone again
            cover = [c for c in (*before, *after, *made) if c.token != g.token]
            for e in earlier:
                assert not passes(g.session_id, keys, g.claims[0].mode, e, cover), (g, e)


def arrival(waiter_id: str) -> int:
    """Waiter ids are w1, w2, ... in the order the requests arrived."""
    return int(waiter_id[1:])
