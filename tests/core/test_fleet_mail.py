"""The pure parts of mail across hosts (docs/FLEET.md): the outbox and seen keys, routing
items for sessions of other hosts out of the mailbox, asks that carry their chain."""

from __future__ import annotations

import itertools

import pytest
from tests.core.test_mailbox import make, reg

from meshd.core.clock import ManualClock
from meshd.core.mail.fleet_post import SEEN_DAYS, FleetPost, Outgoing
from meshd.core.mail.mailbox import Mailbox
from meshd.core.mail.records import Answer, Query
from meshd.protocol.errors import (
    BudgetExceeded,
    Cycle,
    MessageRefused,
    QueryRefused,
    UnknownSession,
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def fleet_box(clock: ManualClock, *sids: str, **settings: object) -> Mailbox:
    """A mailbox whose fleet knows ``r1`` and ``r2`` on host ``far``."""
    mb = make(clock, *sids, **settings)
    mb.host_of = lambda sid: "far" if sid in ("r1", "r2") else None
    return mb


class TestFleetPost:
    def test_a_post_is_pending_until_sent_and_stored_with_its_caller(
        self, clock: ManualClock
    ) -> None:
        keys = (f"h:{i}" for i in itertools.count())
        post = FleetPost(clock, lambda: next(keys))
        out = post.post("mesh.p.mail.far", lambda key: key.encode())
        assert list(post.pending) == ["h:0"]
        assert out.payload == b"h:0"  # the payload carries its key
        assert post.drain() == [("fleet.out", out)]
        post.sent("h:0")
        post.sent("h:0")  # twice: one write
        assert post.pending == {}
        assert post.drain() == [("fleet.sent", "h:0")]

    def test_a_key_is_taken_once(self, clock: ManualClock) -> None:
        post = FleetPost(clock, lambda: "k")
        assert post.is_new("h:1")
        post.take("h:1")
        assert not post.is_new("h:1")
        assert post.drain()[0][:2] == ("fleet.seen", "h:1")

    def test_refused_writes_are_forgotten(self, clock: ManualClock) -> None:
        post = FleetPost(clock, lambda: "h:9")
        post.post("s", lambda key: b"x")
        post.take("h:1")
        post.forget(post.drain())
        assert post.pending == {}
        assert post.is_new("h:1")

    def test_restore_keeps_the_order_and_the_keys(self, clock: ManualClock) -> None:
        post = FleetPost(clock, lambda: "new")
        rows = [Outgoing(f"h:{i}", "s", b"x", 0.0) for i in (3, 1, 2)]
        post.restore(rows, [("g:1", clock.now())])
        assert list(post.pending) == ["h:3", "h:1", "h:2"]
        assert not post.is_new("g:1")

    def test_seen_keys_outlive_the_stream(self, clock: ManualClock) -> None:
        post = FleetPost(clock, lambda: "k")
        post.take("old")
        clock.advance(SEEN_DAYS * 86400 - 60)
        post.prune()
        assert not post.is_new("old")
        clock.advance(120)
        post.prune()
        assert post.is_new("old")


class TestOutbound:
    def test_a_send_to_another_hosts_session_goes_out_not_in(self, clock: ManualClock) -> None:
        mb = fleet_box(clock, "a")
        m = mb.send("a", "r1", "hello")
        assert mb.outbound == [("far", m)]
        assert mb.unread("r1") == []
        writes, events = mb.drain()
        assert writes == []
        assert events == []

    def test_budget_and_size_hold_for_remote_targets(self, clock: ManualClock) -> None:
        mb = fleet_box(clock, "a", message_budget_per_minute=1)
        mb.send("a", "r1", "one")
        with pytest.raises(BudgetExceeded):
            mb.send("a", "r2", "two")

    def test_reply_depth_counts_across_hosts(self, clock: ManualClock) -> None:
        mb = fleet_box(clock, "a", max_reply_depth=2)
        # r1 wrote to a from far (depth 1 there); its item is kept here with its depth
        got = mb.put_item("r1", "a", "message", "hi", depth=1, here=True)
        back = mb.send("a", "r1", "re", reply_to=got.id)
        assert back.depth == 2
        again = mb.put_item("r1", "a", "message", "re re", depth=3, here=True)
        with pytest.raises(MessageRefused):
            mb.send("a", "r1", "re re re", reply_to=again.id)

    def test_an_unknown_id_is_still_unknown(self, clock: ManualClock) -> None:
        mb = fleet_box(clock, "a")
        with pytest.raises(UnknownSession):
            mb.send("a", "nowhere", "hi")

    def test_an_item_from_the_fleet_stays_here(self, clock: ManualClock) -> None:
        mb = fleet_box(clock, "a")
        m = mb.put_item("r1", "r2", "message", "kept", here=True)
        assert mb.outbound == []
        assert mb.unread("r2") == [m]

    def test_a_handoff_to_another_hosts_session_reaches_it(self, clock: ManualClock) -> None:
        mb = fleet_box(clock, "a")
        mb.write_handoff("a", "done: tests pass", to="r1")
        [(host, item)] = mb.outbound
        assert (host, item.kind, item.to) == ("far", "handoff", "r1")


class TestAsksAcrossHosts:
    def test_ask_out_charges_once_and_carries_the_chain(self, clock: ManualClock) -> None:
        mb = fleet_box(clock, "a", message_budget_per_minute=1)
        assert mb.desk.ask_out("a", "r1", "what?") == ("a", "r1")
        with pytest.raises(BudgetExceeded):
            mb.desk.ask_out("a", "r1", "and now?")

    def test_ask_in_without_responder_is_the_status_answer(self, clock: ManualClock) -> None:
        mb = make(clock, "b")
        r = mb.desk.ask_in("r1", "b", "what?", chain=["r1", "b"], timeout=5)
        assert isinstance(r, Answer)
        assert (r.answered_by, r.sender) == ("status", "b")

    def test_ask_in_with_responder_extends_the_carried_chain(self, clock: ManualClock) -> None:
        mb = make(clock, "b", "c")
        mb.respond("b", 1)
        q = mb.desk.ask_in("x", "b", "what?", chain=["r1", "x", "b"], timeout=5)
        assert isinstance(q, Query)
        assert q.chain == ("r1", "x", "b")
        # b, answering, asks a session of another host: the chain goes on from there
        mb.host_of = lambda sid: "far" if sid == "r9" else None
        assert mb.desk.ask_out("b", "r9", "and you?") == ("r1", "x", "b", "r9")
        with pytest.raises(Cycle):
            mb.desk.ask_out("b", "r1", "back to the start?")

    def test_ask_in_refuses_cycles_depth_and_refusers(self, clock: ManualClock) -> None:
        mb = make(clock, "b")
        mb.registry.register(reg("shy", accept_queries=False))
        with pytest.raises(Cycle):
            mb.desk.ask_in("r1", "b", "?", chain=["b", "r1"], timeout=5)
        with pytest.raises(Cycle):
            mb.desk.ask_in("r4", "b", "?", chain=["r1", "r2", "r3", "r4"], timeout=5)
        with pytest.raises(QueryRefused):
            mb.desk.ask_in("r1", "shy", "?", chain=["r1"], timeout=5)
        with pytest.raises(UnknownSession):
            mb.desk.ask_in("r1", "gone", "?", chain=["r1"], timeout=5)

    def test_broadcast_in_skips_refusers_and_the_unselected(self, clock: ManualClock) -> None:
        mb = make(clock, "b", "c")
        mb.registry.register(reg("quiet", accept_messages=False))
        got = mb.desk.broadcast_in("r1", "deploying", select=lambda s: s.session_id != "c")
        assert [m.to for m in got.messages] == ["b"]
        assert got.messages[0].kind == "broadcast"
        assert got.skipped == {"quiet": "does not accept messages"}

    def test_collected_broadcast_in_extends_the_carried_chain(self, clock: ManualClock) -> None:
        mb = make(clock, "b", "c", "d")
        mb.respond("b", 1)
        got = mb.desk.broadcast_in("r1", "status?", chain=["r0", "r1"], collect=True, timeout=5)
        assert [q.chain for q in got.pending] == [("r0", "r1", "b")]
        assert sorted(a.sender for a in got.answers) == ["c", "d"]
        assert got.recipients == ["b", "c", "d"]
