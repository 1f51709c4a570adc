"""The lock table (SPEC §5), pure: no daemon, no sleeps; time from ManualClock."""

from __future__ import annotations

from typing import Any

import pytest

from meshd.core.claims.records import MAX_AHEAD, Fencing, Granted, Held, Outcome, Queued
from meshd.core.claims.table import ClaimTable
from meshd.core.clock import ManualClock
from meshd.keys import Key, from_canonical

PARENTS = {"child": "parent", "grandchild": "child", "sibling": "parent"}


def ancestors(session_id: str) -> tuple[str, ...]:
    chain: list[str] = []
    while session_id in PARENTS:
        session_id = PARENTS[session_id]
        chain.append(session_id)
    return tuple(chain)


def k(text: str) -> Key:
    return from_canonical(text)


class Table:
    """A ClaimTable driven by a ManualClock, with short calls for tests."""

    def __init__(self, fencing: Fencing | None = None) -> None:
        self.clock = ManualClock()
        self.ranks: dict[str, int] = {}
        self.t = ClaimTable(
            self.clock,
            ancestors=ancestors,
            fencing=fencing,
            rank_of=lambda sid: self.ranks.get(sid, 0),
        )

    def rank(self, sid: str, rank: int) -> None:
        self.ranks[sid] = rank
        self.t.rerank(sid)

    def granted(self) -> list[str]:
        return [n.session_id for n in self.t.drain().notices if n.kind == "granted"]

    def acquire(self, sid: str, *keys: str, **kw: Any) -> Outcome:
        return self.t.acquire(sid, [k(x) for x in keys], **kw)

    def grant(self, sid: str, *keys: str, **kw: Any) -> Granted:
        out = self.acquire(sid, *keys, **kw)
        assert isinstance(out, Granted), out
        return out

    def release(self, sid: str, *keys: str) -> list[str]:
        return self.t.release(sid, [k(x) for x in keys] if keys else None)

    def holders(self) -> set[tuple[str, str]]:
        return {(c.session_id, c.resource) for c in self.t.list_claims()}


@pytest.fixture
def tb() -> Table:
    return Table()


class TestPathOverlap:
    def test_ancestor_claim_blocks_descendant(self, tb: Table) -> None:
        """A claim on a folder conflicts with a claim on a file inside it."""
        tb.grant("a", "file:/repo")

        out = tb.acquire("b", "file:/repo/src/a.py")

        assert isinstance(out, Held)
        assert [c.resource for c in out.holders] == ["file:/repo"]

    def test_descendant_claim_blocks_ancestor(self, tb: Table) -> None:
        """A claim on a file blocks a later claim on a folder above it."""
        tb.grant("a", "file:/repo/src/a.py")

        out = tb.acquire("b", "file:/repo")

        assert isinstance(out, Held)
        assert [c.session_id for c in out.holders] == ["a"]

    def test_siblings_paths_do_not_overlap(self, tb: Table) -> None:
        """Two files side by side are claimed by different sessions at once."""
        tb.grant("a", "file:/repo/a.py")

        out = tb.acquire("b", "file:/repo/b.py")

        assert isinstance(out, Granted)

    def test_prefix_is_not_an_ancestor(self, tb: Table) -> None:
        """/repo does not cover /repository: components, not string prefixes."""
        tb.grant("a", "file:/repo")

        assert isinstance(tb.acquire("b", "file:/repository"), Granted)

    def test_repo_and_file_share_one_path_space(self, tb: Table) -> None:
        """repo:/x overlaps file:/x/y, and the other way round."""
        tb.grant("a", "repo:/x")

        assert isinstance(tb.acquire("b", "file:/x/y"), Held)
        assert isinstance(tb.acquire("b", "file:/x"), Held)

    def test_exact_kinds_match_exactly(self, tb: Table) -> None:
        """port:80 and port:8080, cron:a and cron:ab do not overlap."""
        tb.grant("a", "port:80", "cron:a", "branch:/r:main")

        assert isinstance(tb.acquire("b", "port:8080", "cron:ab", "branch:/r:dev"), Granted)
        assert isinstance(tb.acquire("b", "port:80"), Held)

    def test_root_claim_covers_everything_on_paths(self, tb: Table) -> None:
        """A broad claim on / conflicts with every path, but not with ports."""
        tb.grant("a", "file:/")

        assert isinstance(tb.acquire("b", "file:/deep/down/x"), Held)
        assert isinstance(tb.acquire("b", "port:22"), Granted)


class TestAtomicSets:
    def test_a_held_member_grants_nothing(self, tb: Table) -> None:
        """When one key of the set is held, none of the others is granted."""
        tb.grant("a", "port:1")

        out = tb.acquire("b", "port:2", "port:1", "file:/x")

        assert isinstance(out, Held)
        assert {("a", "port:1")} == tb.holders()

    def test_one_token_for_the_whole_set(self, tb: Table) -> None:
        """Every claim of one grant carries the same fencing token."""
        out = tb.grant("a", "port:1", "file:/x", "memory")

        assert {c.token for c in out.claims} == {out.token}

    def test_duplicates_in_a_set_are_one_claim(self, tb: Table) -> None:
        """Naming a key twice claims it once."""
        out = tb.grant("a", "port:1", "port:1")

        assert len(out.claims) == 1

    def test_empty_set_is_refused(self, tb: Table) -> None:
        """A claim needs at least one key."""
        with pytest.raises(ValueError, match="at least one key"):
            tb.acquire("a")


class TestModes:
    def test_shared_holders_coexist(self, tb: Table) -> None:
        """Many sessions hold the same key shared."""
        tb.grant("a", "file:/x", mode="shared")

        assert isinstance(tb.acquire("b", "file:/x/y", mode="shared"), Granted)

    def test_exclusive_conflicts_with_shared(self, tb: Table) -> None:
        """An exclusive request is held by a shared holder, and the other way round."""
        tb.grant("a", "file:/x", mode="shared")
        tb.grant("c", "port:5")

        assert isinstance(tb.acquire("b", "file:/x"), Held)
        assert isinstance(tb.acquire("b", "port:5", mode="shared"), Held)

    def test_upgrade_waits_for_other_shared_holders(self, tb: Table) -> None:
        """shared -> exclusive is a new claim: held while another session shares the key."""
        tb.grant("a", "file:/x", mode="shared")
        tb.grant("b", "file:/x", mode="shared")

        out = tb.acquire("a", "file:/x", mode="exclusive")

        assert isinstance(out, Held)
        assert [c.session_id for c in out.holders] == ["b"]

    def test_mode_change_issues_a_new_token(self, tb: Table) -> None:
        """An upgrade that goes through is a new grant: new token, old token invalid."""
        old = tb.grant("a", "file:/x", mode="shared")

        new = tb.grant("a", "file:/x", mode="exclusive")

        assert new.token > old.token
        assert not new.already_held
        assert not tb.t.validate(k("file:/x"), old.token)
        assert tb.t.validate(k("file:/x"), new.token)

    def test_a_mode_change_logs_the_end_of_the_old_claim(self, tb: Table) -> None:
        """SPEC §5: every grant and release goes to the audit log. The claim a mode
        change replaces ends there (a release, ``how`` "mode change", under its own
        token) before the new grant; before, its token never had an end in the log."""
        old = tb.grant("a", "file:/x", mode="shared")
        tb.t.drain()

        new = tb.grant("a", "file:/x", mode="exclusive")
        rows = [(r.action, r.mode, r.token, r.how) for r in tb.t.drain().audit]

        assert rows == [
            ("release", "shared", old.token, "mode change"),
            ("grant", "exclusive", new.token, ""),
        ]


class TestAlreadyHeld:
    def test_same_set_same_mode_keeps_the_token(self, tb: Table) -> None:
        """Claiming again what one holds answers already_held with the same token."""
        first = tb.grant("a", "file:/x", reason="one")

        again = tb.grant("a", "file:/x", reason="two", ttl=30)

        assert again.already_held
        assert again.token == first.token
        assert again.claims[0].reason == "two"
        assert again.claims[0].ttl == 30

    def test_partial_overlap_grants_the_rest_under_a_new_token(self, tb: Table) -> None:
        """Held keys keep their token; the new ones get the grant's token."""
        first = tb.grant("a", "port:1")

        out = tb.grant("a", "port:1", "port:2")

        tokens = {c.resource: c.token for c in out.claims}
        assert not out.already_held
        assert out.held_before == {"port:1"}
        assert tokens == {"port:1": first.token, "port:2": out.token}
        assert out.token > first.token

    def test_already_held_takes_no_token(self, tb: Table) -> None:
        """Re-claiming does not advance the fencing counter."""
        tb.grant("a", "port:1")
        last = tb.t.fencing.last

        tb.grant("a", "port:1")

        assert last == tb.t.fencing.last


class TestParentChild:
    def test_child_works_under_parents_claim(self, tb: Table) -> None:
        """A descendant's claims never conflict with its ancestor's."""
        tb.grant("parent", "file:/repo")

        assert isinstance(tb.acquire("child", "file:/repo/a"), Granted)
        assert isinstance(tb.acquire("grandchild", "file:/repo/a/b"), Granted)

    def test_parent_claims_over_its_child(self, tb: Table) -> None:
        """An ancestor is not held by its descendant's claim."""
        tb.grant("grandchild", "file:/repo/a")

        assert isinstance(tb.acquire("parent", "file:/repo"), Granted)

    def test_siblings_conflict_as_strangers(self, tb: Table) -> None:
        """Two children of one parent do conflict."""
        tb.grant("child", "file:/repo/a")

        out = tb.acquire("sibling", "file:/repo")

        assert isinstance(out, Held)
        assert [c.session_id for c in out.holders] == ["child"]

    def test_check_leaves_out_related_sessions(self, tb: Table) -> None:
        """check() for a session shows strangers' claims, not its family's."""
        tb.grant("parent", "file:/repo", mode="shared")
        tb.grant("other", "file:/repo/z", mode="shared")

        found = tb.t.check([k("file:/repo/z/1")], session_id="child")

        assert [c.session_id for c in found] == ["other"]

    def test_child_joins_parent_claim_ahead_of_a_waiter(self, tb: Table) -> None:
        """A child claiming under its parent's claim does not queue behind the parent's waiters."""
        tb.grant("parent", "file:/repo")
        assert isinstance(tb.acquire("other", "file:/repo", wait=True), Queued)

        assert isinstance(tb.acquire("child", "file:/repo/a"), Granted)


class TestFifo:
    def test_waiter_granted_on_release(self, tb: Table) -> None:
        """A release wakes the waiter and the grant arrives as a notice (after the
        holder's own ``released`` notice, SPEC §6)."""
        tb.grant("a", "file:/x")
        q = tb.acquire("b", "file:/x/y", wait=True, waiter_id="wb")
        assert isinstance(q, Queued)
        tb.t.drain()

        tb.release("a")

        notices = tb.t.drain().notices
        assert [(n.kind, n.session_id, n.waiter_id) for n in notices] == [
            ("released", "a", None),
            ("granted", "b", "wb"),
        ]
        assert notices[1].granted is not None
        assert ("b", "file:/x/y") in tb.holders()

    def test_no_barging_past_an_earlier_waiter(self, tb: Table) -> None:
        """A request that could go now is held while an earlier waiter wants the same key."""
        tb.grant("a", "port:1")
        tb.acquire("b", "port:1", "port:2", wait=True)

        out = tb.acquire("c", "port:2")

        assert isinstance(out, Held)
        assert out.holders == ()
        assert [w.session_id for w in out.ahead] == ["b"]

    def test_shared_reader_does_not_barge_past_a_writer(self, tb: Table) -> None:
        """A shared request waits behind a queued exclusive one, though shared holders are in."""
        tb.grant("a", "file:/x", mode="shared")
        tb.acquire("w", "file:/x", wait=True)

        assert isinstance(tb.acquire("r", "file:/x", mode="shared"), Held)

    def test_waiters_granted_in_arrival_order(self, tb: Table) -> None:
        """Three waiters on one key get it one after another, first come first served."""
        tb.grant("a", "port:1")
        for sid in ("b", "c", "d"):
            tb.acquire(sid, "port:1", wait=True, waiter_id=sid)
        order = []

        for _ in range(3):
            holder = next(iter(tb.t.list_claims())).session_id
            tb.release(holder)
            order += [n.session_id for n in tb.t.drain().notices if n.kind == "granted"]

        assert order == ["b", "c", "d"]

    def test_compatible_shared_waiters_go_together(self, tb: Table) -> None:
        """Consecutive shared waiters are all granted by one release."""
        tb.grant("a", "file:/x")
        tb.acquire("b", "file:/x", mode="shared", wait=True)
        tb.acquire("c", "file:/x/y", mode="shared", wait=True)
        tb.t.drain()

        tb.release("a")

        granted = {n.session_id for n in tb.t.drain().notices if n.kind == "granted"}
        assert granted == {"b", "c"}

    def test_whole_set_waits_until_every_key_is_free(self, tb: Table) -> None:
        """A waiting set is granted only when its last key frees."""
        tb.grant("a", "port:1")
        tb.grant("b", "port:2")
        tb.acquire("c", "port:1", "port:2", wait=True)

        tb.release("a")
        assert ("c", "port:1") not in tb.holders()
        tb.release("b")

        assert {("c", "port:1"), ("c", "port:2")} <= tb.holders()

    def test_upgrade_with_a_writer_queued_is_a_deadlock(self, tb: Table) -> None:
        """A shared holder upgrading behind a writer that waits for it is refused at once."""
        tb.grant("a", "file:/x", mode="shared")
        tb.acquire("w", "file:/x", wait=True)

        out = tb.acquire("a", "file:/x", wait=True)

        assert isinstance(out, Held)
        assert out.deadlock

    def test_downgrade_lets_shared_waiters_in(self, tb: Table) -> None:
        """Re-claiming an exclusive key as shared grants the readers waiting for it."""
        tb.grant("a", "file:/x")
        tb.acquire("r", "file:/x", mode="shared", wait=True)

        tb.grant("a", "file:/x", mode="shared")

        assert ("r", "file:/x") in tb.holders()

    def test_parents_new_claim_frees_its_childs_wait(self, tb: Table) -> None:
        """A child queued behind a stranger goes once its parent's new claim covers the key."""
        tb.grant("sibling", "file:/x", mode="shared")
        tb.acquire("w", "file:/x", wait=True)
        assert isinstance(tb.acquire("child", "file:/x", mode="shared", wait=True), Queued)

        tb.grant("parent", "file:/x", mode="shared")  # covered by its own child, sibling

        assert ("child", "file:/x") in tb.holders()


class TestLongQueues:
    """The queue parks each waiter on one blocker: same answers, less work."""

    def test_held_names_the_first_waiters_and_says_there_are_more(self, tb: Table) -> None:
        """A held reply lists at most MAX_AHEAD earlier waiters, first first, and says more."""
        tb.grant("a", "port:1")
        for i in range(MAX_AHEAD + 5):
            tb.acquire(f"s{i}", "port:1", wait=True)

        out = tb.acquire("late", "port:1")

        assert isinstance(out, Held)
        assert [w.session_id for w in out.ahead] == [f"s{i}" for i in range(MAX_AHEAD)]
        assert out.more_ahead

    def test_a_sessions_many_waits_all_go_before_a_later_stranger(self, tb: Table) -> None:
        """One session waiting five times on a key gets it (once, then refreshes) before
        a stranger who queued after it."""
        tb.grant("a", "port:1")
        for i in range(5):
            tb.acquire("g", "port:1", wait=True, waiter_id=f"g{i}")
        tb.acquire("x", "port:1", wait=True, waiter_id="x")
        tb.t.drain()

        tb.release("a")

        granted = [n.waiter_id for n in tb.t.drain().notices if n.kind == "granted"]
        assert granted == ["g0", "g1", "g2", "g3", "g4"]
        assert tb.holders() == {("g", "port:1")}
        assert [w.waiter_id for w in tb.t.waiting()] == ["x"]

    def test_a_wider_wait_of_the_same_session_is_not_held_by_a_narrower_one(
        self, tb: Table
    ) -> None:
        """An earlier wait of the same session stands in only for a set it is part of."""
        tb.grant("a", "port:1")
        tb.acquire("g", "port:1", "port:2", wait=True, waiter_id="wide")
        tb.acquire("g", "port:2", wait=True, waiter_id="narrow")

        assert tb.holders() == {("a", "port:1"), ("g", "port:2")}
        assert [w.waiter_id for w in tb.t.waiting()] == ["wide"]

    def test_readers_behind_readers_are_granted_together(self, tb: Table) -> None:
        """Fifty shared waiters behind a writer all go at its release; a writer after them
        waits for the last reader."""
        tb.grant("a", "file:/x")
        for i in range(50):
            tb.acquire(f"r{i}", "file:/x", mode="shared", wait=True)
        tb.acquire("w", "file:/x", wait=True, waiter_id="w")
        tb.t.drain()

        tb.release("a")
        assert len(tb.holders()) == 50
        for i in range(49):
            tb.release(f"r{i}")
        assert [w.waiter_id for w in tb.t.waiting()] == ["w"]
        tb.release("r49")

        assert tb.holders() == {("w", "file:/x")}

    def test_withdrawing_the_middle_of_a_queue_keeps_the_order(self, tb: Table) -> None:
        """Cancelling waiters in the middle and at the head leaves the rest in arrival order."""
        tb.grant("a", "port:1")
        for i in range(6):
            tb.acquire(f"s{i}", "port:1", wait=True, waiter_id=f"w{i}")
        for wid in ("w2", "w0", "w4"):
            tb.t.cancel_waiter(wid)
        order = []

        for _ in range(3):
            holder = next(iter(tb.t.list_claims())).session_id
            tb.release(holder)
            order += [n.waiter_id for n in tb.t.drain().notices if n.kind == "granted"]

        assert order == ["w1", "w3", "w5"]


class TestRanks:
    """SPEC §5b: waiters are served by rank, highest first, FIFO within a rank."""

    def test_the_higher_rank_is_served_first(self, tb: Table) -> None:
        tb.ranks["urgent"] = 5
        tb.grant("a", "port:1")
        tb.acquire("early", "port:1", wait=True)
        tb.acquire("urgent", "port:1", wait=True)
        tb.t.drain()

        tb.release("a")

        assert tb.granted() == ["urgent"]
        assert [w.session_id for w in tb.t.waiting()] == ["early"]

    def test_fifo_within_a_rank(self, tb: Table) -> None:
        tb.ranks.update(b=2, c=2, d=1)
        tb.grant("a", "port:1")
        for sid in ("d", "b", "c"):
            tb.acquire(sid, "port:1", wait=True)
        order = []

        for _ in range(3):
            tb.release(next(iter(tb.t.list_claims())).session_id)
            order += tb.granted()

        assert order == ["b", "c", "d"]

    def test_a_rank_set_while_waiting_reorders_the_queue(self, tb: Table) -> None:
        tb.grant("a", "port:1")
        for sid in ("b", "c", "d"):
            tb.acquire(sid, "port:1", wait=True)

        tb.rank("d", 3)
        tb.rank("b", -1)

        assert [(w.session_id, w.rank) for w in tb.t.waiting()] == [("d", 3), ("c", 0), ("b", -1)]
        order = []
        for _ in range(3):
            tb.release(next(iter(tb.t.list_claims())).session_id)
            order += tb.granted()
        assert order == ["d", "c", "b"]

    def test_raising_a_rank_can_grant_at_once(self, tb: Table) -> None:
        """Queued behind a waiter (not a holder), a wait goes as soon as it out-ranks it."""
        tb.grant("a", "port:1")
        tb.acquire("b", "port:1", "port:2", wait=True)
        tb.acquire("c", "port:2", wait=True)
        tb.t.drain()

        tb.rank("c", 1)

        assert tb.granted() == ["c"]
        assert ("c", "port:2") in tb.holders()

    def test_lowering_a_rank_lets_those_it_held_go(self, tb: Table) -> None:
        tb.ranks.update(b=2, c=1)
        tb.grant("a", "port:1")
        tb.acquire("b", "port:1", "port:2", wait=True)
        tb.acquire("c", "port:2", wait=True)
        tb.t.drain()

        tb.rank("b", 0)

        assert tb.granted() == ["c"]

    def test_a_new_request_passes_lower_ranked_waiters_only(self, tb: Table) -> None:
        """Nothing barges past a waiter of the same or a higher rank; a higher rank may."""
        tb.grant("a", "port:1")
        tb.acquire("b", "port:1", "port:2", wait=True)

        assert isinstance(tb.acquire("same", "port:2"), Held)
        tb.ranks["high"] = 1
        assert isinstance(tb.acquire("high", "port:2"), Granted)

    def test_held_lists_the_waiters_ahead_by_rank(self, tb: Table) -> None:
        tb.ranks.update(b=1, c=3)
        tb.grant("a", "port:1")
        for sid in ("b", "c", "d"):
            tb.acquire(sid, "port:1", wait=True)
        tb.ranks["e"] = 1

        out = tb.acquire("e", "port:1")

        assert isinstance(out, Held)
        assert [w.session_id for w in out.ahead] == ["c", "b"]

    def test_a_rank_does_not_pass_a_holder(self, tb: Table) -> None:
        """Ranks order the queue; they never take a claim from its holder."""
        tb.ranks["boss"] = 100
        tb.grant("a", "port:1")

        out = tb.acquire("boss", "port:1")

        assert isinstance(out, Held)
        assert [c.session_id for c in out.holders] == ["a"]

    def test_deadlock_is_still_refused_across_ranks(self, tb: Table) -> None:
        tb.ranks["b"] = 9
        tb.grant("a", "port:1")
        tb.grant("b", "port:2")
        assert isinstance(tb.acquire("a", "port:2", wait=True), Queued)

        out = tb.acquire("b", "port:1", wait=True)

        assert isinstance(out, Held)
        assert out.deadlock


class TestReservedSet:
    """SPEC §5b: a paused session's claims go into a set kept for its preemptors, then it."""

    def test_pause_serves_the_preemptor_first_and_keeps_strangers_out(self, tb: Table) -> None:
        tb.grant("low", "res:x")
        tb.acquire("stranger", "res:x", wait=True, waiter_id="s")
        tb.acquire("boss", "res:x", wait=True, waiter_id="b")
        tb.t.drain()

        reserved = tb.t.paused.pause("low", ["boss"])

        assert reserved == ["res:x"]
        assert tb.granted() == ["boss"]
        assert [w.waiter_id for w in tb.t.waiting()] == ["s"]
        tb.release("boss")
        assert tb.granted() == []  # kept for low now, not for the earlier stranger
        assert isinstance(tb.acquire("low", "res:x", wait=True), Granted)
        tb.t.paused.unreserve("low")
        assert tb.holders() == {("low", "res:x")}
        assert [w.waiter_id for w in tb.t.waiting()] == ["s"]

    def test_the_paused_session_does_not_pass_its_preemptor(self, tb: Table) -> None:
        tb.grant("low", "res:x")
        tb.t.paused.pause("low", ["boss"])

        early = tb.acquire("low", "res:x")
        assert isinstance(early, Held)
        assert [c.session_id for c in early.holders] == ["reserved:low"]
        tb.grant("boss", "res:x")
        tb.release("boss")

        assert isinstance(tb.acquire("low", "res:x"), Granted)

    def test_a_resume_queued_behind_the_preemptor_is_granted_at_its_release(
        self, tb: Table
    ) -> None:
        tb.grant("low", "res:x")
        tb.t.paused.pause("low", ["boss"])
        tb.acquire("low", "res:x", wait=True, waiter_id="resume")
        tb.grant("boss", "res:x")
        tb.t.drain()

        tb.release("boss")

        assert tb.granted() == ["low"]

    def test_a_paused_session_that_ends_drops_its_reservation(self, tb: Table) -> None:
        tb.grant("low", "res:x")
        tb.acquire("stranger", "res:x", wait=True)
        tb.t.paused.pause("low", [])
        tb.t.drain()

        tb.t.release_session("low", "ended")

        assert tb.granted() == ["stranger"]
        assert tb.t.paused.view("low") is None

    def test_a_preemptor_that_ends_unserved_hands_the_set_to_the_owner(self, tb: Table) -> None:
        tb.grant("low", "res:x")
        tb.t.paused.pause("low", ["boss"])
        assert isinstance(tb.acquire("low", "res:x"), Held)

        tb.t.release_session("boss", "ended")

        assert isinstance(tb.acquire("low", "res:x"), Granted)

    def test_a_preemptor_that_does_not_take_the_set_in_time_loses_its_turn(self, tb: Table) -> None:
        """The preemptor has until ``pause``'s ``until`` to be served on the set; after
        that the set admits its owner, whose queued resume is granted. (Before, a
        preemptor that never claimed kept the resume waiting forever.)"""
        tb.grant("low", "res:x")
        tb.t.paused.pause("low", ["boss"], until=tb.clock.monotonic() + 300)
        tb.acquire("low", "res:x", wait=True, waiter_id="resume")
        tb.t.drain()

        tb.clock.advance(299)
        tb.t.wake_deferred()
        early = tb.granted()
        tb.clock.advance(1)
        tb.t.wake_deferred()

        assert early == []
        assert tb.granted() == ["low"]
        assert tb.t.paused.view("low") is not None
        assert tb.t.paused.view("low")[2] == ()  # type: ignore[index]
        tb.t.paused.unreserve("low")
        assert isinstance(tb.acquire("boss", "res:x"), Held)  # low holds it again

    def test_a_lapse_is_logged_by_whichever_wake_finds_it(self, tb: Table) -> None:
        """The lapse writes its own audit row, so it is logged whoever calls
        ``wake_deferred`` first after the deadline: the claim waits' wake (a withdrawal)
        as well as the preempt sweeper. (Before: only the sweeper logged it, by comparing
        the set before and after its own call; a wait withdrawn in between lapsed the
        set unlogged, and a preemptor granted by that call was logged as lapsed.)"""
        tb.grant("low", "res:x", "res:y")
        tb.t.paused.pause("low", ["boss"], until=tb.clock.monotonic() + 300)
        tb.t.drain()

        tb.clock.advance(300)
        tb.t.wake_deferred()  # as ClaimWaits._wake_now does
        rows = [(a.action, a.session_id, a.resource, a.how, a.by) for a in tb.t.drain().audit]
        tb.t.wake_deferred()  # as the sweeper does next: nothing more to log

        assert rows == [
            ("preempt", "low", r, "the preemptor's turn ran out", "boss")
            for r in ("res:x", "res:y")
        ]
        assert tb.t.drain().audit == []

    def test_a_preemptor_served_in_time_keeps_the_owner_behind_it(self, tb: Table) -> None:
        tb.grant("low", "res:x")
        tb.t.paused.pause("low", ["boss"], until=tb.clock.monotonic() + 300)
        tb.grant("boss", "res:x")
        tb.acquire("low", "res:x", wait=True, waiter_id="resume")
        tb.t.drain()

        tb.clock.advance(301)
        tb.t.wake_deferred()

        assert tb.granted() == []  # boss holds it: the deadline took nothing from it
        tb.release("boss")
        assert tb.granted() == ["low"]

    def test_a_preemptor_taking_the_set_a_key_at_a_time_stays_first(self, tb: Table) -> None:
        """SPEC §5b: the preemptor is served first, and the paused session is next "when
        it releases". A preemptor that claims one key of the set and then another keeps
        its turn for the second (before: its first grant handed the set to the owner,
        and its second claim was held by the reservation)."""
        tb.grant("low", "res:x", "res:y")
        tb.t.paused.pause("low", ["boss"], until=tb.clock.monotonic() + 300)
        tb.grant("boss", "res:x")
        tb.acquire("low", "res:x", "res:y", wait=True, waiter_id="resume")
        tb.clock.advance(301)
        tb.t.wake_deferred()  # the deadline takes no turn from a preemptor being served

        second = tb.acquire("boss", "res:y")
        tb.t.drain()
        tb.release("boss")

        assert isinstance(second, Granted)
        assert tb.granted() == ["low"]

    def test_a_preemptor_that_releases_part_of_the_set_hands_the_rest_to_the_owner(
        self, tb: Table
    ) -> None:
        """Its release ends its turn: the owner is next for the whole set at once, not
        after the preemptor's grace (nor does the preemptor keep a turn it let go)."""
        tb.grant("low", "res:x", "res:y")
        tb.t.paused.pause("low", ["boss"], until=tb.clock.monotonic() + 300)
        tb.grant("boss", "res:x")
        tb.acquire("low", "res:x", "res:y", wait=True, waiter_id="resume")
        tb.t.drain()

        tb.release("boss")

        assert tb.granted() == ["low"]
        tb.t.paused.unreserve("low")
        assert isinstance(tb.acquire("boss", "res:y"), Held)

    def test_each_preemptor_keeps_its_turn_until_it_releases(self, tb: Table) -> None:
        """Of two preemptors, one that was granted and let go leaves the other first; the
        grace takes the turn of one never granted, not of one being served."""
        tb.grant("low", "res:x", "res:y")
        tb.t.paused.pause("low", ["boss", "chief"], until=tb.clock.monotonic() + 300)
        tb.grant("boss", "res:x")
        tb.release("boss")
        assert isinstance(tb.acquire("low", "res:x"), Held)
        tb.grant("chief", "res:y")
        tb.clock.advance(301)
        tb.t.wake_deferred()

        assert isinstance(tb.acquire("chief", "res:x"), Granted)
        tb.release("chief")
        assert isinstance(tb.acquire("low", "res:x", "res:y"), Granted)

    def test_pausing_with_nothing_held_reserves_nothing(self, tb: Table) -> None:
        assert tb.t.paused.pause("idle", ["boss"]) == []
        assert tb.t.paused.view("idle") is None

    def test_a_wait_queued_before_the_pause_is_withdrawn_not_granted(self, tb: Table) -> None:
        """Pausing releases everything the session has going: its claims into the
        reserved set, its queued waits withdrawn (answered ``held``). Left queued, a
        wait was granted while the session was paused, holding a key nobody could have
        while it did no work."""
        tb.grant("low", "res:x")
        tb.grant("other", "res:y")
        tb.acquire("low", "res:y", wait=True, waiter_id="w")
        tb.t.drain()

        tb.t.paused.pause("low", [])
        out = tb.t.drain()
        tb.release("other")

        assert [(c.waiter_id, c.why) for c in out.cancelled] == [("w", "paused")]
        assert [h.session_id for h in out.cancelled[0].held.holders] == ["other"]
        assert tb.granted() == []
        assert tb.t.waiting() == ()
        assert ("low", "res:y") not in tb.holders()

    def test_a_session_paused_holding_nothing_has_its_waits_withdrawn_too(self, tb: Table) -> None:
        tb.grant("other", "res:y")
        tb.acquire("idle", "res:y", wait=True, waiter_id="w")
        tb.t.drain()

        assert tb.t.paused.pause("idle", []) == []
        out = tb.t.drain()
        tb.release("other")

        assert [(c.waiter_id, c.why) for c in out.cancelled] == [("w", "paused")]
        assert tb.granted() == []

    def test_a_wait_made_while_paused_is_served(self, tb: Table) -> None:
        """Only what was queued before the pause goes: asking while paused (resume
        queues so for its reserved set) is asking anew, served as usual."""
        tb.grant("low", "res:x")
        tb.grant("other", "res:y")
        tb.t.paused.pause("low", [])
        tb.acquire("low", "res:y", wait=True, waiter_id="w")
        tb.t.drain()

        tb.release("other")

        assert tb.granted() == ["low"]


class TestCancel:
    def test_cancelled_waiter_is_never_granted(self, tb: Table) -> None:
        """A waiter withdrawn before the release gets nothing when the key frees."""
        tb.grant("a", "port:1")
        tb.acquire("b", "port:1", wait=True, waiter_id="wb")

        held = tb.t.cancel_waiter("wb")
        tb.release("a")

        assert held is not None
        assert [c.session_id for c in held.holders] == ["a"]
        assert tb.holders() == set()
        assert not [n for n in tb.t.drain().notices if n.kind == "granted"]

    def test_cancel_lets_later_waiters_go(self, tb: Table) -> None:
        """Withdrawing an earlier waiter grants a later one it was blocking."""
        tb.grant("a", "port:1")
        tb.acquire("b", "port:1", "port:2", wait=True, waiter_id="wb")
        tb.acquire("c", "port:2", wait=True, waiter_id="wc")

        tb.t.cancel_waiter("wb")

        assert ("c", "port:2") in tb.holders()

    def test_a_leaving_waiter_is_never_granted_and_the_next_goes_once_it_is_withdrawn(
        self, tb: Table
    ) -> None:
        """A waiter whose caller left (``leave``: its connection closed, the withdrawal
        a few turns away) is not granted when it comes up; the next one goes when the
        connection withdraws it. (Withdrawing it then and there marked the next waiter,
        as often leaving too: a storm of hang-ups cascaded through the line in one pass.)"""
        tb.grant("a", "port:1")
        tb.acquire("b", "port:1", wait=True, waiter_id="wb")
        tb.acquire("c", "port:1", wait=True, waiter_id="wc")
        tb.t.drain()

        tb.t.leave("wb")
        tb.release("a")
        out = tb.t.drain()

        assert [n.session_id for n in out.notices if n.kind == "granted"] == []
        assert tb.holders() == set()

        tb.t.cancel_waiter("wb", why="closed")  # its connection's withdrawal
        out = tb.t.drain()

        assert [(x.waiter_id, x.why) for x in out.cancelled] == [("wb", "closed")]
        assert [n.session_id for n in out.notices if n.kind == "granted"] == ["c"]
        assert tb.holders() == {("c", "port:1")}
        assert tb.t.waiting() == ()

    def test_a_departed_callers_waiter_is_not_granted(self, tb: Table) -> None:
        """``departed`` (the shell's: the waiter's connection hung up, its waits not
        marked yet) keeps a waiter from being granted, as ``leave`` does."""
        tb.grant("a", "port:1")
        tb.acquire("b", "port:1", wait=True, waiter_id="c7.1")
        tb.acquire("c", "port:1", wait=True, waiter_id="c8.1")
        tb.t.drain()
        tb.t.departures(lambda wid: wid.startswith("c7."))

        tb.release("a")
        assert tb.holders() == set()

        tb.t.cancel_waiter("c7.1", why="closed")  # its connection's withdrawal
        assert tb.holders() == {("c", "port:1")}

    def test_hang_ups_do_not_cascade_through_the_line(self, tb: Table) -> None:
        """1,000 waiters whose callers all left: one withdrawal looks at no one else
        (each is withdrawn by its own connection, a few a turn)."""
        tb.grant("a", "port:1")
        for i in range(1000):
            tb.acquire(f"s{i}", "port:1", wait=True, waiter_id=f"w{i}")
        tb.t.drain()
        for i in range(1000):
            tb.t.leave(f"w{i}")

        tb.release("a")
        tb.t.cancel_waiter("w0", why="closed")
        out = tb.t.drain()

        assert [x.waiter_id for x in out.cancelled] == ["w0"]
        assert len(tb.t.waiting()) == 999
        assert tb.holders() == set()

    def test_deferred_wake_lets_later_waiters_go_once(self, tb: Table) -> None:
        """Withdrawals with wake=False grant nothing until wake_deferred, then in order."""
        tb.grant("a", "port:1")
        tb.acquire("b", "port:1", "port:2", wait=True, waiter_id="wb1")
        tb.acquire("b", "port:1", "port:2", wait=True, waiter_id="wb2")
        tb.acquire("c", "port:2", wait=True, waiter_id="wc")

        tb.t.cancel_waiter("wb1", wake=False)
        tb.t.cancel_waiter("wb2", wake=False)
        before = tb.holders()
        tb.t.wake_deferred()

        assert ("c", "port:2") not in before
        assert ("c", "port:2") in tb.holders()

    def test_cancelling_twice_is_harmless(self, tb: Table) -> None:
        """A second cancel (or one after the grant) returns None."""
        tb.grant("a", "port:1")
        tb.acquire("b", "port:1", wait=True, waiter_id="wb")
        tb.t.cancel_waiter("wb")

        assert tb.t.cancel_waiter("wb") is None

    def test_session_end_cancels_its_waits(self, tb: Table) -> None:
        """release_session withdraws the session's waiters and reports them."""
        tb.grant("a", "port:1")
        tb.acquire("b", "port:1", wait=True, waiter_id="wb")

        tb.t.release_session("b", "ended")
        tb.release("a")

        out = tb.t.drain()
        assert [(c.waiter_id, c.why) for c in out.cancelled] == [("wb", "ended")]
        assert tb.holders() == set()


class TestDeadlock:
    def test_two_session_cycle_is_refused(self, tb: Table) -> None:
        """A waits on B's key while B waits on A's: B's wait is refused at once."""
        tb.grant("a", "port:1")
        tb.grant("b", "port:2")
        assert isinstance(tb.acquire("a", "port:2", wait=True), Queued)

        out = tb.acquire("b", "port:1", wait=True)

        assert isinstance(out, Held)
        assert out.deadlock
        assert tb.t.waiting(session_id="b") == ()

    def test_three_session_cycle_is_refused(self, tb: Table) -> None:
        """a -> b -> c -> a through three keys is found."""
        for sid, port in (("a", "port:1"), ("b", "port:2"), ("c", "port:3")):
            tb.grant(sid, port)
        tb.acquire("a", "port:2", wait=True)
        tb.acquire("b", "port:3", wait=True)

        out = tb.acquire("c", "port:1", wait=True)

        assert isinstance(out, Held)
        assert out.deadlock

    def test_a_chain_is_not_a_cycle(self, tb: Table) -> None:
        """Waiting on a session that waits on a third is fine."""
        tb.grant("a", "port:1")
        tb.grant("b", "port:2")
        tb.acquire("b", "port:1", wait=True)

        assert isinstance(tb.acquire("c", "port:2", wait=True), Queued)


class TestSteal:
    def test_steal_takes_over_and_tells_the_holder(self, tb: Table) -> None:
        """Conflicting claims go, the stealer holds the set, the holder gets 'stolen'."""
        old = tb.grant("a", "file:/repo", reason="refactor")

        out = tb.t.steal("b", [k("file:/repo/x")], reason="hotfix")

        out_box = tb.t.drain()
        assert [c.resource for c in out.stolen] == ["file:/repo"]
        assert tb.holders() == {("b", "file:/repo/x")}
        assert not tb.t.validate(k("file:/repo"), old.token)
        (notice,) = [n for n in out_box.notices if n.kind == "stolen"]
        assert (notice.session_id, notice.by, notice.reason) == ("a", "b", "hotfix")
        assert ("steal", "a", "b") in [(r.action, r.session_id, r.by) for r in out_box.audit]

    def test_steal_bypasses_the_queue(self, tb: Table) -> None:
        """An earlier waiter stays queued; the stealer goes first."""
        tb.grant("a", "port:1")
        tb.acquire("w", "port:1", wait=True)

        tb.t.steal("s", [k("port:1")], reason="urgent")

        assert tb.holders() == {("s", "port:1")}
        assert len(tb.t.waiting()) == 1

    def test_stealer_sees_previous(self, tb: Table) -> None:
        """The stealer's grant says whose claim it took, and how."""
        tb.grant("a", "port:1")

        out = tb.t.steal("b", [k("port:1")], reason="x")

        assert [(p.session_id, p.how) for p in out.previous] == [("a", "stolen")]

    def test_steal_needs_a_reason(self, tb: Table) -> None:
        """An empty reason is refused."""
        with pytest.raises(ValueError, match="reason"):
            tb.t.steal("b", [k("port:1")], reason=" ")


class TestTtl:
    def test_claim_expires_and_holder_is_told(self, tb: Table) -> None:
        """When the ttl runs out the claim is freed with an 'expired' notice."""
        out = tb.grant("a", "port:1", ttl=10)
        tb.clock.advance(9)
        assert tb.t.expire_ttls() == []

        tb.clock.advance(1)
        notices = tb.t.expire_ttls()

        assert [(n.kind, n.session_id, n.token) for n in notices] == [("expired", "a", out.token)]
        assert tb.holders() == set()

    def test_validate_is_false_after_expiry(self, tb: Table) -> None:
        """The fencing check fails once the ttl ran out, even before the sweep."""
        out = tb.grant("a", "port:1", ttl=10)
        tb.clock.advance(10)

        assert not tb.t.validate(k("port:1"), out.token)
        tb.t.expire_ttls()
        assert not tb.t.validate(k("port:1"), out.token)

    def test_refresh_moves_the_deadline(self, tb: Table) -> None:
        """Re-claiming with a ttl restarts it; the old deadline is ignored."""
        tb.grant("a", "port:1", ttl=10)
        tb.clock.advance(8)
        tb.grant("a", "port:1", ttl=10)
        tb.clock.advance(8)

        assert tb.t.expire_ttls() == []
        assert tb.t.next_deadline() == tb.clock.monotonic() + 2

    def test_unrefresh_puts_back_the_ttl_and_reason(self, tb: Table) -> None:
        """A refresh whose commit was refused is undone: the claim keeps its old
        deadline and reason (and token); a new key of the same grant is not touched."""
        tb.grant("a", "port:1", ttl=10, reason="first")
        g = tb.grant("a", "port:1", "port:2", ttl=100, reason="second")
        tb.t.unrefresh(g.refreshed)

        (c1,) = [c for c in tb.t.list_claims() if c.resource == "port:1"]
        assert (c1.reason, c1.ttl, c1.deadline) == ("first", 10, tb.clock.monotonic() + 10)
        assert {c.resource for c in g.refreshed} == {"port:1"}
        tb.clock.advance(10)
        assert [n.resources for n in tb.t.expire_ttls()] == [("port:1",)]

    def test_expiry_wakes_waiters_and_reports_previous(self, tb: Table) -> None:
        """A waiter gets the key when a ttl frees it, and learns how the last holder went."""
        tb.grant("a", "port:1", ttl=5)
        tb.acquire("b", "port:1", wait=True)
        tb.clock.advance(5)

        tb.t.expire_ttls()

        (granted,) = [n.granted for n in tb.t.drain().notices if n.kind == "granted"]
        assert granted is not None
        assert [(p.session_id, p.how) for p in granted.previous] == [("a", "ttl")]

    def test_suspend_does_not_expire(self, tb: Table) -> None:
        """Wall time passing alone (a laptop asleep) frees nothing."""
        tb.grant("a", "port:1", ttl=5)
        tb.clock.suspend(3600)

        assert tb.t.expire_ttls() == []


class TestRelease:
    def test_release_is_idempotent(self, tb: Table) -> None:
        """Releasing what one does not hold is not an error and releases nothing."""
        tb.grant("a", "port:1")

        assert tb.release("b", "port:1") == []
        assert tb.release("a", "port:1") == ["port:1"]
        assert tb.release("a", "port:1") == []

    def test_release_is_exact(self, tb: Table) -> None:
        """Releasing file:/a leaves the same session's file:/a/b alone."""
        tb.grant("a", "file:/a", "file:/a/b")

        tb.release("a", "file:/a")

        assert tb.holders() == {("a", "file:/a/b")}

    def test_claims_of_looks_up_exactly_those_in_listing_order(self, tb: Table) -> None:
        """What a release names, among many a session holds: each once, exact matches
        only, in the listing's order (oldest grant first), whatever the order asked."""
        for i in range(50):
            tb.grant("a", f"port:{i + 1}")
        tb.grant("a", "file:/a", "file:/a/b")
        tb.grant("b", "port:99")
        listing = tb.t.list_claims("a")

        got = tb.t.claims_of("a", ["file:/a/b", "port:7", "port:7", "port:99", "file:/a/b/c"])

        assert got == tuple(c for c in listing if c.resource in {"port:7", "file:/a/b"})
        assert tb.t.claims_of("nobody", ["port:7"]) == ()

    def test_a_grant_to_a_session_holding_many_keeps_the_rest(self, tb: Table) -> None:
        """A grant looks only at the keys it names: the session's other claims keep
        their tokens, a key held again in its mode keeps its own."""
        for i in range(20):
            tb.grant("a", f"port:{i + 1}")
        before = {c.resource: c.token for c in tb.t.list_claims("a")}

        again = tb.acquire("a", "port:3", "port:40")

        assert isinstance(again, Granted)
        assert not again.already_held
        assert again.held_before == frozenset({"port:3"})
        after = {c.resource: c.token for c in tb.t.list_claims("a")}
        assert {r: t for r, t in after.items() if r != "port:40"} == before
        assert after["port:40"] == again.token

    def test_clean_release_leaves_no_previous(self, tb: Table) -> None:
        """After a clean release the next holder sees no 'previous'."""
        tb.grant("a", "port:1")
        tb.release("a")

        assert tb.grant("b", "port:1").previous == ()

    def test_session_death_frees_claims_and_says_lost(self, tb: Table) -> None:
        """A dead session's claims go at once; it gets 'lost'; the next holder sees how."""
        tb.grant("a", "port:1", "file:/x")
        tb.t.drain()

        released = tb.t.release_session("a", "died")

        out = tb.t.drain()
        assert sorted(released) == ["file:/x", "port:1"]
        assert [(n.kind, n.how) for n in out.notices] == [("lost", "died")]
        assert {r.action for r in out.audit} == {"lose"}
        assert [p.how for p in tb.grant("b", "port:1").previous] == ["died"]

    def test_session_end_is_clean(self, tb: Table) -> None:
        """An ended session's claims are released without notices."""
        tb.grant("a", "port:1")
        tb.t.drain()

        tb.t.release_session("a", "ended")

        out = tb.t.drain()
        assert out.notices == []
        assert [r.action for r in out.audit] == ["release"]

    def test_trie_is_pruned(self, tb: Table) -> None:
        """Releasing every claim leaves only the root node behind."""
        tb.grant("a", "file:/a/b/c/d", "port:1")
        tb.acquire("b", "file:/a/b", wait=True, waiter_id="w")
        tb.t.cancel_waiter("w")

        tb.release("a")

        stats = tb.t.statistics()
        assert (stats.claims, stats.waiters, stats.path_nodes, stats.exact_keys) == (0, 0, 1, 0)


class TestFencing:
    def test_tokens_only_grow(self, tb: Table) -> None:
        """Each grant's token is larger than every earlier one."""
        tokens = [tb.grant(f"s{i}", f"port:{i + 1}").token for i in range(5)]

        assert tokens == sorted(set(tokens))

    def test_first_token_asks_for_a_block_to_be_persisted(self, tb: Table) -> None:
        """The outbox carries the new reservation the store must persist."""
        tb.grant("a", "port:1")

        assert tb.t.drain().reserve_until == tb.t.fencing.reserve_until

    def test_restart_resumes_above_the_persisted_block(self) -> None:
        """A table built from the persisted block end never reissues a token."""
        first = Table(Fencing(block=100))
        issued = first.grant("a", "port:1").token

        second = Table(Fencing(reserved=first.t.fencing.reserve_until, block=100))

        assert second.grant("a", "port:1").token > issued
        assert second.grant("b", "port:2").token > first.t.fencing.reserve_until

    def test_restored_claims_hold(self) -> None:
        """A claim put back by the store conflicts and validates as before."""
        tb = Table(Fencing(reserved=100))
        tb.t.restore(
            "a", k("file:/x"), mode="exclusive", token=7, reason="r", since=1.0,
            ttl_left=None,
        )  # fmt: skip

        assert tb.t.validate(k("file:/x"), 7)
        assert isinstance(tb.acquire("b", "file:/x/y"), Held)


class TestAudit:
    def test_every_change_is_logged(self, tb: Table) -> None:
        """grant, refresh, release, expire each leave an audit record."""
        tb.grant("a", "port:1", reason="work", ttl=5)
        tb.grant("a", "port:1")
        tb.release("a")
        tb.grant("b", "port:2", ttl=1)
        tb.clock.advance(1)
        tb.t.expire_ttls()

        actions = [(r.action, r.session_id, r.resource) for r in tb.t.drain().audit]

        assert actions == [
            ("grant", "a", "port:1"),
            ("refresh", "a", "port:1"),
            ("release", "a", "port:1"),
            ("grant", "b", "port:2"),
            ("expire", "b", "port:2"),
        ]


class TestCheck:
    def test_check_returns_overlapping_claims_of_others(self, tb: Table) -> None:
        """check() finds claims on ancestors and descendants, any mode, not the caller's."""
        tb.grant("a", "file:/p", mode="shared")
        tb.grant("b", "file:/p/q/r", mode="shared")
        tb.grant("me", "file:/p/q/s", mode="shared")

        found = tb.t.check([k("file:/p/q")], session_id="me")

        assert [(c.session_id, c.resource) for c in found] == [
            ("a", "file:/p"),
            ("b", "file:/p/q/r"),
        ]

    def test_check_changes_nothing(self, tb: Table) -> None:
        """A check leaves no audit record and no claim."""
        tb.t.check([k("file:/p")])

        assert tb.t.drain().audit == []
        assert tb.holders() == set()
