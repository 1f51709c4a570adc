"""The pure mailbox: inbox states, limits, queries and their chains, broadcasts, handoffs."""

from __future__ import annotations

from typing import Any

import pytest

from meshd.core.clock import ManualClock
from meshd.core.mail.mailbox import Mailbox
from meshd.core.mail.records import (
    Answer,
    Handoff,
    Message,
    Query,
    item_of,
    responder_channel,
)
from meshd.core.sessions.registry import Registration, Registry
from meshd.core.settings import Settings
from meshd.protocol.errors import (
    BudgetExceeded,
    Cycle,
    InvalidParams,
    MessageRefused,
    NotFound,
    QueryRefused,
    SessionExpired,
    TooLarge,
    UnknownSession,
)


def reg(sid: str, **kw: Any) -> Registration:
    base: dict[str, Any] = dict(
        session_id=sid, source="cli", task="", status="idle", model="", provider="",
        pid=None, pid_start=None, host="h", cwd=None, repo=None, branch=None, worktree=None,
        tools=[], parent=None, slot=None, kanban_task=None, accept_queries=None,
        accept_messages=None, liveness="heartbeat", expire_after=None, bind=False, conn_id=None,
    )  # fmt: skip
    base.update(kw)
    return Registration(**base)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def make(clock: ManualClock, *sids: str, **settings: Any) -> Mailbox:
    st = Settings(**settings)
    registry = Registry(clock, st, "p")
    for sid in sids:
        registry.register(reg(sid))
    return Mailbox(clock, st, registry)


@pytest.fixture
def mb(clock: ManualClock) -> Mailbox:
    return make(clock, "a", "b", "c", "d", "e")


def kinds(mb: Mailbox) -> list[str]:
    writes, _ = mb.drain()
    return [w[0] for w in writes]


def live_ask(mb: Mailbox, asker: str, to: str, conn: int = 1, timeout: float = 10) -> Query:
    mb.respond(to, conn)
    q = mb.ask(asker, to, "what are you doing?", timeout=timeout)
    assert isinstance(q, Query)
    return q


class TestSend:
    def test_message_is_queued_without_a_subscriber(self, mb: Mailbox) -> None:
        """A message to a session nobody reads for waits as ``queued`` and is stored."""
        m = mb.send("a", "b", "hello")
        writes, events = mb.drain()

        assert m.state == "queued"
        assert m.sender == "a"
        assert [("message.put", m)] == writes
        assert [e.session_id for e in events] == ["b"]

    def test_push_to_a_subscriber_delivers_once_its_frame_is_out(self, mb: Mailbox) -> None:
        """A message pushed to a subscribed reader stays ``queued`` until the shell says
        its frame went out in full (``pushed``); then ``delivered``, never ``read``. Its
        event already says ``delivered``: what it is once the reader has it."""
        mb.subscribe("b", 7)
        m = mb.send("a", "b", "hello")
        _, events = mb.drain()
        queued = m.state

        changed = mb.items.pushed("b", m.id, 5.0)
        again = mb.items.pushed("b", m.id, 6.0)
        writes, _ = mb.drain()

        assert queued == "queued"
        assert [e.body.state for e in events] == ["delivered"]  # type: ignore[attr-defined]
        assert (changed, again) == (True, False)
        assert (m.state, m.delivered_at, m.read_at) == ("delivered", 5.0, None)
        assert writes == [("message.state", m.id, "delivered", 5.0)]

    def test_event_says_who_and_that_it_is_not_the_user(self, mb: Mailbox) -> None:
        """Every pushed item names its sender and carries the framing sentence."""
        mb.send("a", "b", "hello", reply_to=None)
        _, events = mb.drain()
        payload = events[0].payload

        assert payload["from"] == "a"
        assert "not from the user" in payload["framing"]
        assert {"id", "kind", "from", "text", "created_at", "state", "reply_to"} <= set(payload)

    def test_refused_when_target_does_not_accept_messages(self, clock: ManualClock) -> None:
        """``accept_messages = false`` refuses with MESSAGE_REFUSED and stores nothing."""
        mb = make(clock, "a")
        mb.registry.register(reg("quiet", accept_messages=False))

        with pytest.raises(MessageRefused):
            mb.send("a", "quiet", "hi")
        assert kinds(mb) == []

    def test_body_over_max_body_bytes_is_too_large(self, clock: ManualClock) -> None:
        """Text over ``max_body_bytes`` (counted in UTF-8 bytes) is TOO_LARGE."""
        mb = make(clock, "a", "b", max_body_bytes=10)

        mb.send("a", "b", "x" * 10)
        with pytest.raises(TooLarge):
            mb.send("a", "b", "é" * 6)

    def test_unknown_and_ended_targets_are_refused(self, mb: Mailbox) -> None:
        """A target that never existed or has ended gets the registry's errors."""
        mb.registry.end("c")

        with pytest.raises(UnknownSession):
            mb.send("a", "nobody", "hi")
        with pytest.raises(SessionExpired):
            mb.send("a", "c", "hi")

    def test_notice_comes_from_the_daemon(self, mb: Mailbox) -> None:
        """A notice is framed as the daemon's, not as another session's words."""
        m = mb.notice("a", "your claim on port:8080 expired")

        assert (m.sender, m.kind) == ("meshd", "notice")
        assert "mesh daemon" in item_of(m).framing


class TestReading:
    def test_peek_delivers_without_reading(self, mb: Mailbox) -> None:
        """A peek hands items over (``delivered``) and leaves them unread."""
        m = mb.send("a", "b", "hello")
        mb.drain()
        got = mb.inbox("b", peek=True)

        assert [m] == got
        assert m.state == "delivered"
        assert [("message.state", m.id, "delivered", m.delivered_at)] == mb.drain()[0]
        assert mb.unread_count("b") == 1

    def test_read_without_peek_marks_read_and_forgets_text(self, mb: Mailbox) -> None:
        """``meshctl inbox`` marks what it printed read, and memory lets go of it."""
        m = mb.send("a", "b", "hello")
        mb.drain()
        mb.inbox("b")

        assert m.state == "read"
        assert [("message.state", m.id, "read", m.read_at)] == mb.drain()[0]
        assert mb.unread("b") == []

    def test_ack_of_a_queued_item_is_ignored(self, mb: Mailbox) -> None:
        """An item never handed to a reader cannot be acked read."""
        m = mb.send("a", "b", "hello")
        mb.drain()

        assert mb.ack("b", [m.id]) == []
        assert m.state == "queued"

    def test_ack_after_delivery_reads_once(self, mb: Mailbox) -> None:
        """Ack after a peek marks read; a second ack changes nothing."""
        m = mb.send("a", "b", "hello")
        mb.inbox("b", peek=True)
        mb.drain()

        assert [m.id] == mb.ack("b", [m.id])
        assert [m.id] == [w[1] for w in mb.drain()[0]]
        assert mb.ack("b", [m.id]) == []

    def test_ack_of_someone_elses_item_does_nothing(self, mb: Mailbox) -> None:
        """A session cannot mark another session's item read."""
        m = mb.send("a", "b", "hello")
        mb.inbox("b", peek=True)

        assert mb.ack("c", [m.id]) == []

    def test_only_the_ids_a_reader_was_shown(self, mb: Mailbox) -> None:
        """``only`` hands over exactly those items (a history page), nothing else."""
        first = mb.send("a", "b", "one")
        second = mb.send("a", "b", "two")
        mb.inbox("b", only=[second.id, 999])

        assert (first.state, second.state) == ("queued", "read")

    def test_discard_forgets_an_unstored_item(self, mb: Mailbox) -> None:
        """An item whose commit failed leaves no trace in memory."""
        m = mb.send("a", "b", "x")
        mb.discard(m.id)

        assert mb.unread("b") == []
        assert mb.reply_target("b", m.id) is None

    def test_inbox_is_oldest_first_and_limited(self, mb: Mailbox) -> None:
        """Unread items come oldest first, at most ``limit`` of them."""
        ids = [mb.send("a", "b", f"m{i}").id for i in range(3)]

        assert ids[:2] == [m.id for m in mb.inbox("b", limit=2)]
        assert [ids[2]] == [m.id for m in mb.unread("b")]


class TestBudget:
    def test_budget_is_per_sender_over_a_sliding_minute(self, clock: ManualClock) -> None:
        """The budget+1-th message within 60 s is refused; another sender is unaffected."""
        mb = make(clock, "a", "b", "c", message_budget_per_minute=3)
        for _ in range(3):
            mb.send("a", "b", "x")
            clock.advance(10)

        with pytest.raises(BudgetExceeded) as err:
            mb.send("a", "b", "x")
        assert err.value.data["retry_after_s"] == 30.0
        mb.send("c", "b", "x")

    def test_window_slides(self, clock: ManualClock) -> None:
        """Once the oldest send is 60 s old, one more may go."""
        mb = make(clock, "a", "b", message_budget_per_minute=2)
        mb.send("a", "b", "x")
        clock.advance(30)
        mb.send("a", "b", "x")
        clock.advance(30)

        mb.send("a", "b", "x")
        with pytest.raises(BudgetExceeded):
            mb.send("a", "b", "x")

    def test_a_broadcast_counts_once(self, clock: ManualClock) -> None:
        """A broadcast to many sessions uses one unit of the budget."""
        mb = make(clock, "a", "b", "c", "d", message_budget_per_minute=2)
        out = mb.broadcast("a", "deploying")
        mb.send("a", "b", "x")

        assert len(out.messages) == 3
        with pytest.raises(BudgetExceeded):
            mb.broadcast("a", "again")

    def test_refused_sends_cost_nothing(self, clock: ManualClock) -> None:
        """A send refused for size does not use the budget."""
        mb = make(clock, "a", "b", message_budget_per_minute=1, max_body_bytes=4)
        with pytest.raises(TooLarge):
            mb.send("a", "b", "too long")

        mb.send("a", "b", "ok")


class TestReplyDepth:
    def ping_pong(self, mb: Mailbox, n: int) -> Message:
        m = mb.send("a", "b", "1")
        for i in range(n - 1):
            sender, to = (m.to, m.sender)
            m = mb.send(sender, to, str(i + 2), reply_to=m.id)
        return m

    def test_chain_between_two_sessions_is_capped(self, clock: ManualClock) -> None:
        """Replies between the same two sessions deeper than max_reply_depth are refused."""
        mb = make(clock, "a", "b", max_reply_depth=4)
        last = self.ping_pong(mb, 4)

        assert last.depth == 4
        with pytest.raises(MessageRefused) as err:
            mb.send(last.to, last.sender, "5", reply_to=last.id)
        assert err.value.data["reason"] == "max_reply_depth"
        assert "sent each other 4 messages in one reply chain within 10 minutes" in str(
            err.value
        )  # the chain's messages, the first one with its 3 replies

    def test_chain_older_than_ten_minutes_starts_again(self, clock: ManualClock) -> None:
        """A reply to a message more than 10 minutes old starts a new chain."""
        mb = make(clock, "a", "b", max_reply_depth=2)
        last = self.ping_pong(mb, 2)
        clock.advance(601)

        assert mb.send(last.to, last.sender, "again", reply_to=last.id).depth == 1

    def test_reply_to_a_third_party_is_a_new_chain(self, clock: ManualClock) -> None:
        """Forwarding a thread to another session does not inherit its depth."""
        mb = make(clock, "a", "b", "c", max_reply_depth=2)
        last = self.ping_pong(mb, 2)

        assert mb.send("a", "c", "fyi", reply_to=last.id).depth == 1

    def test_depth_survives_a_read(self, mb: Mailbox) -> None:
        """The cap still counts after the parent was read and left memory."""
        m = mb.send("a", "b", "1")
        mb.inbox("b")

        assert mb.send("b", "a", "2", reply_to=m.id).depth == 2

    def test_reply_target_is_the_other_party(self, mb: Mailbox) -> None:
        """A reply goes to whoever was on the other end of the original."""
        m = mb.send("a", "b", "1")

        assert mb.reply_target("b", m.id) == "a"
        assert mb.reply_target("a", m.id) == "b"
        assert mb.reply_target("a", 999) is None


class TestAsk:
    def test_status_responder_answers_at_once(self, clock: ManualClock) -> None:
        """Without a live responder the daemon answers from what the session reported."""
        mb = make(clock, "a")
        mb.registry.register(reg("b", task="refactor auth", cwd="/p", branch="feat/auth"))
        mb.registry.heartbeat("b")
        ans = mb.ask("a", "b", "what are you doing?", timeout=10, claims=["file:/p/src"])

        assert isinstance(ans, Answer)
        assert (ans.answered_by, ans.timed_out, ans.sender) == ("status", False, "b")
        assert "b is idle: refactor auth (in /p, on branch feat/auth)." in ans.answer
        assert "Holds file:/p/src." in ans.answer

    def test_query_goes_only_to_the_responder_channel(self, mb: Mailbox) -> None:
        """A live responder gets the query; plain subscribers of the session do not."""
        mb.subscribe("b", 2)
        q = live_ask(mb, "a", "b")
        writes, events = mb.drain()

        assert writes == []  # answers within the ask are not persisted
        assert [(responder_channel("b"), "query")] == [(e.session_id, e.kind) for e in events]
        assert ("b", "a", q.id) == (
            events[0].payload["session_id"],
            events[0].payload["from"],
            events[0].payload["id"],
        )
        assert "not from the user" in events[0].payload["framing"]

    def test_answer_in_time_wakes_and_is_the_session(self, mb: Mailbox, clock: ManualClock) -> None:
        """An answer before the deadline wakes the waiter and is ``answered_by: session``."""
        woken: list[int] = []
        mb.wake = woken.append
        q = live_ask(mb, "a", "b")
        clock.advance(1.5)

        assert mb.answer("b", q.id, "running tests") is None
        assert [q.id] == woken
        assert Answer(q.id, "running tests", "session", False, "b", 1.5) == mb.finish(q.id)
        assert q.id not in mb.queries

    def test_no_answer_in_time_gives_the_status_answer(
        self, mb: Mailbox, clock: ManualClock
    ) -> None:
        """A silent live responder gives the caller the status answer, timed out."""
        q = live_ask(mb, "a", "b", timeout=5)
        clock.advance(5)
        ans = mb.finish(q.id)

        assert (ans.answered_by, ans.timed_out, ans.elapsed_s) == ("status", True, 5.0)

    def test_late_answer_goes_to_the_askers_inbox(self, mb: Mailbox, clock: ManualClock) -> None:
        """An answer after the ask returned is stored in the asker's inbox as ``answer``."""
        q = live_ask(mb, "a", "b", timeout=5)
        clock.advance(5)
        mb.finish(q.id)
        late = mb.answer("b", q.id, "done now")

        assert late is not None
        assert ("answer", "b", "a", q.id) == (late.kind, late.sender, late.to, late.reply_to)
        assert [late] == mb.unread("a")

    def test_timeout_is_capped_by_max_query_timeout(self, clock: ManualClock) -> None:
        """No ask waits past ``max_query_timeout``."""
        mb = make(clock, "a", "b", max_query_timeout=3)
        q = live_ask(mb, "a", "b", timeout=100)

        assert clock.monotonic() + 3 == q.deadline

    def test_refused_when_target_does_not_accept_queries(self, clock: ManualClock) -> None:
        """``accept_queries = false`` is QUERY_REFUSED."""
        mb = make(clock, "a")
        mb.registry.register(reg("q", accept_queries=False))

        with pytest.raises(QueryRefused):
            mb.ask("a", "q", "?", timeout=1)

    def test_answer_bounded_to_two_kib(self, mb: Mailbox) -> None:
        """An answer over 2 KiB is TOO_LARGE and the query stays open."""
        q = live_ask(mb, "a", "b")

        with pytest.raises(TooLarge):
            mb.answer("b", q.id, "x" * 2049)
        assert mb.answer("b", q.id, "x" * 2048) is None

    def test_only_the_target_answers_once(self, mb: Mailbox) -> None:
        """Another session, or a second answer, is NOT_FOUND."""
        q = live_ask(mb, "a", "b")

        with pytest.raises(NotFound):
            mb.answer("c", q.id, "me!")
        mb.answer("b", q.id, "first")
        with pytest.raises(NotFound):
            mb.answer("b", q.id, "second")

    def test_closed_responder_connection_is_forgotten(self, mb: Mailbox) -> None:
        """When the responder's connection closes, the status responder is back."""
        mb.respond("b", 9)
        mb.connection_closed(9)

        assert isinstance(mb.ask("a", "b", "?", timeout=1), Answer)

    def test_a_responder_leaving_with_a_question_gives_the_status_answer_now(
        self, mb: Mailbox, clock: ManualClock
    ) -> None:
        """The question was pushed to that connection alone: when the session's last
        responder leaves, the asker is woken with the status answer (not timed out)
        instead of waiting out its timeout; another responder of it keeps it open."""
        woken: list[int] = []
        mb.desk.wake = woken.append
        q = live_ask(mb, "a", "b", conn=7, timeout=30)
        mb.respond("b", 8)
        mb.connection_closed(7)
        assert woken == []  # connection 8 still responds for b
        mb.connection_closed(8)
        clock.advance(1)

        assert woken == [q.id]
        ans = mb.finish(q.id)
        assert (ans.answered_by, ans.timed_out, ans.elapsed_s) == ("status", False, 1.0)

    def test_an_answer_after_the_responder_left_is_late(self, mb: Mailbox) -> None:
        """Once the asker had the status answer, an answer still given goes to its inbox."""
        q = live_ask(mb, "a", "b", conn=7)
        mb.connection_closed(7)
        mb.finish(q.id)
        late = mb.answer("b", q.id, "done after all")

        assert late is not None
        assert [late] == mb.unread("a")

    def test_a_close_forgets_only_that_connection(self, mb: Mailbox) -> None:
        """Closing one connection leaves the others' subscriptions and responders; a
        session that ended before its connection closed is forgotten without error."""
        mb.subscribe("b", 3)
        mb.subscribe("b", 4)
        mb.respond("c", 3)
        mb.respond("d", 3)
        mb.session_ended("d")
        mb.connection_closed(3)

        assert mb.has_subscriber("b")
        assert not mb.has_responder("c")
        assert not mb.has_responder("d")
        mb.connection_closed(4)
        assert not mb.has_subscriber("b")
        mb.respond("c", 3)  # a reused connection id starts afresh
        assert mb.has_responder("c")

    def test_a_subscriber_is_not_a_responder(self, mb: Mailbox) -> None:
        """Following a session's events does not make a connection its responder."""
        mb.subscribe("b", 3)

        assert not mb.has_responder("b")


class TestChain:
    def test_asking_back_while_answering_is_a_cycle(self, mb: Mailbox) -> None:
        """B, answering A's query, may not ask A."""
        live_ask(mb, "a", "b")
        mb.respond("a", 2)

        with pytest.raises(Cycle) as err:
            mb.ask("b", "a", "what do you mean?", timeout=1)
        assert err.value.data["chain"] == ["a", "b", "a"]

    def test_chain_extends_and_is_checked_downstream(self, mb: Mailbox) -> None:
        """A → B → C is fine; C, answering, may not ask A or B."""
        live_ask(mb, "a", "b")
        q2 = live_ask(mb, "b", "c", conn=2)

        assert q2.chain == ("a", "b", "c")
        with pytest.raises(Cycle):
            mb.ask("c", "a", "?", timeout=1)

    def test_deeper_than_three_is_a_cycle(self, mb: Mailbox) -> None:
        """A → B → C → D is allowed; one more hop is refused."""
        live_ask(mb, "a", "b")
        live_ask(mb, "b", "c", conn=2)
        live_ask(mb, "c", "d", conn=3)
        mb.respond("e", 4)

        with pytest.raises(Cycle) as err:
            mb.ask("d", "e", "?", timeout=1)
        assert err.value.data["limit"] == 3

    def test_answered_query_no_longer_extends(self, mb: Mailbox) -> None:
        """Once B has answered A, B asking A is a fresh query."""
        q = live_ask(mb, "a", "b")
        mb.answer("b", q.id, "ok")
        mb.finish(q.id)

        assert live_ask(mb, "b", "a", conn=2).chain == ("b", "a")

    def test_asking_oneself_is_a_cycle(self, mb: Mailbox) -> None:
        """A session cannot ask itself."""
        with pytest.raises(Cycle):
            mb.ask("a", "a", "?", timeout=1)

    def test_status_answered_asks_leave_no_chain(self, mb: Mailbox) -> None:
        """An ask answered by the status responder at once opens nothing."""
        mb.ask("a", "b", "?", timeout=1)
        mb.respond("a", 5)

        assert isinstance(mb.ask("b", "a", "?", timeout=1), Query)


class TestStatusText:
    def test_handoff_addressed_elsewhere_is_never_shown(self, mb: Mailbox) -> None:
        """The status responder shows B's last handoff only if unaddressed or to the asker."""
        mb.write_handoff("b", "general notes")
        mb.write_handoff("b", "secret for c", to="c")

        assert "general notes" in mb.status_text("b", "a")
        assert "secret for c" not in mb.status_text("b", "a")
        assert "secret for c" in mb.status_text("b", "c")

    def test_ended_session(self, mb: Mailbox) -> None:
        """A session that is gone is said to have ended."""
        mb.registry.end("b")

        assert mb.status_text("b", "a") == "b has ended."

    def test_status_answer_is_bounded(self, mb: Mailbox) -> None:
        """Even with a long handoff and many claims the answer stays within 2 KiB."""
        mb.write_handoff("b", "y" * 8000)
        text = mb.status_text("b", "a", [f"file:/p/{i}" for i in range(300)])

        assert len(text.encode()) <= 2048


class TestBroadcast:
    def test_every_live_session_but_the_sender(self, mb: Mailbox) -> None:
        """A broadcast reaches every other live session's inbox as kind ``broadcast``."""
        out = mb.broadcast("a", "deploying in 5 min")

        assert out.recipients == ["b", "c", "d", "e"]
        assert {"broadcast"} == {m.kind for m in out.messages}

    def test_predicate_narrows_targets(self, mb: Mailbox) -> None:
        """Only sessions the caller's overlap predicate accepts are reached."""
        out = mb.broadcast("a", "touching src/", select=lambda s: s.session_id in {"c", "x"})

        assert out.recipients == ["c"]

    def test_refusing_sessions_are_skipped_not_fatal(self, mb: Mailbox) -> None:
        """A session with accept_messages = false is skipped and listed."""
        mb.registry.register(reg("q", accept_messages=False))
        out = mb.broadcast("a", "hi")

        assert out.skipped["q"] == "does not accept messages"
        assert "q" not in out.recipients

    def test_collect_asks_live_and_answers_for_silent(self, mb: Mailbox) -> None:
        """With collect, live responders get a query; the rest a message and a status answer."""
        mb.respond("b", 1)
        out = mb.broadcast("a", "who uses port 8080?", collect=True, timeout=3)

        assert [q.target for q in out.pending] == ["b"]
        assert [a.sender for a in out.answers] == ["c", "d", "e"]
        assert {"status"} == {a.answered_by for a in out.answers}
        assert [m.to for m in out.messages] == ["c", "d", "e"]

    def test_items_are_those_one_put_each_would_make(self, clock: ManualClock) -> None:
        """A broadcast puts its items in one go: the same messages and pushes, in the
        same order, as one put_item per recipient (subscribed ones delivered); their
        rows go as one ``message.put_many`` of exactly those items."""
        one, each = make(clock, "a", "b", "c", "d"), make(clock, "a", "b", "c", "d")
        for box in (one, each):
            box.subscribe("c", 7)
        out = one.broadcast("a", "rebasing main")
        made = [each.put_item("a", to, "broadcast", "rebasing main") for to in ("b", "c", "d")]

        assert out.messages == made
        assert [m.state for m in made] == ["queued", "queued", "queued"]  # until pushed
        (writes, pushes), (writes_each, pushes_each) = one.drain(), each.drain()
        assert writes == [("message.put_many", tuple(made))]
        assert writes_each == [("message.put", m) for m in made]
        assert pushes == pushes_each
        assert [one.unread(sid) for sid in "bcd"] == [each.unread(sid) for sid in "bcd"]

    def test_a_refused_broadcast_leaves_no_item(self, clock: ManualClock) -> None:
        """Writes the disk refused are forgotten: a broadcast's items leave every inbox
        and the reply index, and the unread counts are as before it."""
        mb = make(clock, "a", "b", "c", "d")
        kept = mb.send("b", "c", "before")
        mb.drain()
        mb.broadcast("a", "refused")
        writes, _ = mb.drain()
        mb.forget(writes)

        assert [m.id for m in mb.unread("c")] == [kept.id]
        assert [mb.unread_count(sid) for sid in "bcd"] == [0, 1, 0]
        assert mb.reply_target("b", writes[0][1][0].id) is None

    def test_collect_skips_the_senders_chain(self, mb: Mailbox) -> None:
        """A collected broadcast made while answering never asks back up the chain."""
        live_ask(mb, "c", "a")
        out = mb.broadcast("a", "anyone?", collect=True)

        assert out.skipped["c"] == "already in this query chain"


class TestHandoffs:
    def test_write_is_durable_and_lands_in_the_inbox(self, mb: Mailbox) -> None:
        """A handoff to a live session is stored and shows in its inbox as ``handoff``."""
        h = mb.write_handoff(
            "a", "auth done", to="b", files=["src/auth.py"], branch="feat/auth",
            next_steps=["write tests"],
        )  # fmt: skip
        writes, _ = mb.drain()

        assert [w[0] for w in writes] == ["handoff.put", "message.put"]
        assert h == writes[0][1]
        item = mb.unread("b")[0]
        assert (item.kind, item.sender) == ("handoff", "a")
        assert "- write tests" in item.text

    def test_requested_handoff_need_not_land_in_the_inbox(self, mb: Mailbox) -> None:
        """``deliver=False`` stores the handoff without an inbox item."""
        mb.write_handoff("a", "done", to="b", deliver=False)

        assert mb.unread("b") == []
        assert "done" in mb.status_text("a", "b")

    def test_ids_grow(self, mb: Mailbox) -> None:
        """Handoff ids come from their own growing sequence."""
        first = mb.write_handoff("a", "one")

        assert first.id + 1 == mb.write_handoff("a", "two").id

    def test_to_oneself_is_refused(self, mb: Mailbox) -> None:
        """A handoff addressed to its own author is refused."""
        with pytest.raises(InvalidParams):
            mb.write_handoff("a", "x", to="a")

    def test_size_counts_summary_files_and_steps(self, clock: ManualClock) -> None:
        """The whole handoff text is bounded by max_body_bytes."""
        mb = make(clock, "a", max_body_bytes=50)

        with pytest.raises(TooLarge):
            mb.write_handoff("a", "short", next_steps=["n" * 60])

    def test_stored_for_an_ended_sender_when_asked(self, mb: Mailbox) -> None:
        """A requested handoff can be stored for a sender that just ended."""
        mb.registry.end("b")

        with pytest.raises(SessionExpired):
            mb.write_handoff("b", "x")
        assert mb.write_handoff("b", "x", to="a", require_live=False).sender == "b"


class TestSessionEnd:
    def test_pending_query_to_an_ended_session_returns_status(
        self, mb: Mailbox, clock: ManualClock
    ) -> None:
        """Its end wakes the asker, who gets the status answer, not a timeout."""
        woken: list[int] = []
        mb.wake = woken.append
        q = live_ask(mb, "a", "b")
        mb.registry.end("b")

        assert [q.id] == mb.session_ended("b")
        assert [q.id] == woken
        ans = mb.finish(q.id)
        assert (ans.answered_by, ans.timed_out, ans.answer) == ("status", False, "b has ended.")
        assert not mb.queries

    def test_ended_responder_is_forgotten(self, mb: Mailbox) -> None:
        """An ended session keeps no responder."""
        mb.respond("b", 1)
        mb.session_ended("b")

        assert not mb.has_responder("b")


class TestRestoreAndHousekeeping:
    def test_restore_takes_unread_and_continues_ids(self, clock: ManualClock) -> None:
        """After a restart unread items are back and new ids never reuse old ones."""
        mb = make(clock, "a", "b")
        old = Message(id=41, to="b", sender="a", kind="message", text="hi", created_at=clock.now())
        mb.restore(
            [old],
            [Handoff(id=9, sender="a", to=None, summary="s")],
            max_message_id=50,
            max_handoff_id=3,
        )

        assert [old] == mb.unread("b")
        assert mb.send("a", "b", "x").id == 51
        assert mb.write_handoff("a", "y").id == 10
        assert "s" in mb.status_text("a", "b")

    def test_restored_recent_message_keeps_its_depth(self, clock: ManualClock) -> None:
        """The reply cap survives a restart for messages of the last 10 minutes."""
        mb = make(clock, "a", "b", max_reply_depth=2)
        old = Message(
            id=5, to="b", sender="a", kind="message", text="", created_at=clock.now() - 60,
            state="read", depth=2,
        )  # fmt: skip
        mb.restore([old], [])

        assert mb.unread("b") == []
        with pytest.raises(MessageRefused):
            mb.send("b", "a", "again", reply_to=5)

    def test_sweep_forgets_closed_queries(self, mb: Mailbox, clock: ManualClock) -> None:
        """A timed-out query accepts late answers only until max_query_timeout after it."""
        q = live_ask(mb, "a", "b", timeout=5)
        clock.advance(5)
        mb.finish(q.id)
        clock.advance(60)
        mb.sweep()

        with pytest.raises(NotFound):
            mb.answer("b", q.id, "too late")

    def test_sweep_forgets_abandoned_queries(self, mb: Mailbox, clock: ManualClock) -> None:
        """A query whose waiter vanished without finishing it is dropped after close."""
        q = live_ask(mb, "a", "b", timeout=5)
        clock.advance(65)
        mb.sweep()

        assert q.id not in mb.queries

    def test_prune_drops_old_unread_of_ended_sessions(
        self, mb: Mailbox, clock: ManualClock
    ) -> None:
        """history_days prunes ended sessions' old items; live inboxes keep theirs."""
        mb.send("a", "b", "for b")
        mb.send("a", "c", "for c")
        mb.registry.end("b")
        clock.advance(31 * 86400)
        mb.drain()
        cutoff = mb.prune()

        assert mb.unread("b") == []
        assert len(mb.unread("c")) == 1
        assert [("message.prune", cutoff)] == mb.drain()[0]

    def test_prune_ignores_a_wall_clock_step(self, mb: Mailbox, clock: ManualClock) -> None:
        """A +40-day wall-clock step ages nothing: pruning goes by monotonic time in a run."""
        mb.send("a", "b", "for b")
        mb.registry.end("b")
        start = clock.now()
        clock.step(40 * 86400)
        cutoff = mb.prune()

        assert cutoff == start - 30 * 86400
        assert len(mb.unread("b")) == 1

    def test_prune_after_a_clock_step_back(self, mb: Mailbox, clock: ManualClock) -> None:
        """A step back makes the cutoff earlier (keeps more), never later."""
        start = clock.now()
        clock.step(-86400)

        assert mb.prune() == start - 86400 - 30 * 86400

    def test_statistics(self, mb: Mailbox) -> None:
        """Counts of unread items, pending queries, responders and subscribers."""
        mb.send("a", "b", "x")
        live_ask(mb, "a", "c")
        mb.subscribe("d", 1)
        stats = mb.statistics()

        assert (
            stats.unread,
            stats.pending_queries,
            stats.responders,
            stats.subscribers,
        ) == (1, 1, 1, 1)
