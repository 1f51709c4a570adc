"""The blocking client's messaging surface (``Session.send``, ``ask``, ``on_query`` …)
against a real daemon. Live responders are real ``on_query`` threads on connections of
their own.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support import wait_for

from meshctl import Mesh, SessionExpired, UnknownSession
from meshctl._core import session as _session
from meshctl._core.messaging import Item, Query, clip_answer
from meshctl._sync.session import Session
from meshd.protocol.contract import label

Daemon = Any


S = Session


def session(mesh: Mesh, sid: str, task: str = "", **fields: Any) -> S:
    core = _session.SessionCore(
        task=task,
        session_id=sid,
        liveness="heartbeat",
        bind=False,
        fields={"source": "cli", **fields},
    )
    return S(mesh, core).start()


@pytest.fixture
def mesh(daemon: Daemon) -> Iterator[Mesh]:
    with Mesh(socket=daemon.socket, autostart=False) as m:
        yield m


@pytest.fixture
def pair(mesh: Mesh) -> Iterator[tuple[S, S]]:
    a = session(mesh, "a", "writing docs")
    b = session(mesh, "b", "refactor auth", cwd="/tmp", branch="feat/auth")
    yield a, b
    for s in (a, b):
        s.end()


class TestMessages:
    def test_inbox_hands_over_and_ack_reads(self, pair: tuple[S, S]) -> None:
        """inbox() leaves items delivered (framed) until ack(); then they are read."""
        a, b = pair
        sent = a.send("b", "conclusion is X")
        assert sent is not None
        items = b.inbox()
        states_before = a.message_states([sent.id])
        acked = b.ack([i.id for i in items])
        again = b.inbox()
        states_after = a.message_states([sent.id])

        assert [(i.kind, i.from_, i.text, i.state) for i in items] == [
            ("message", "a", "conclusion is X", "delivered")
        ]
        assert "not from the user" in items[0].framing
        assert items[0].framed() == "[from a — another session of yours, not you] conclusion is X"
        assert states_before == {sent.id: "delivered"}
        assert acked == [sent.id]
        assert again == []
        assert states_after == {sent.id: "read"}

    def test_peek_false_reads_at_once(self, pair: tuple[S, S]) -> None:
        """inbox(peek=False) marks read what it returns, as `meshctl inbox` does."""
        a, b = pair
        a.send("b", "one")
        got = b.inbox(peek=False)
        history = b.inbox(all=True)

        assert [i.state for i in got] == ["read"]
        assert b.inbox() == []
        assert [(i.text, i.state) for i in history] == [("one", "read")]

    def test_reply_goes_back(self, pair: tuple[S, S]) -> None:
        """A reply names only the message; it lands in the sender's inbox, linked."""
        a, b = pair
        first = a.send("b", "which port?")
        assert first is not None
        back = b.send(None, "8080", reply_to=first.id)
        got = a.inbox()

        assert back is not None
        assert (back.to, back.depth) == ("a", 2)
        assert [(i.from_, i.text, i.reply_to) for i in got] == [("b", "8080", first.id)]

    def test_forgotten_sender_registers_again(self, daemon: Daemon, pair: tuple[S, S]) -> None:
        """When the daemon ended *this* session, send registers it again, says so, and sends."""
        a, b = pair
        daemon.call("session.end", {"session_id": "a"})
        sent = a.send("b", "still here")
        got = b.inbox()

        assert sent is not None
        assert [i.text for i in got] == ["still here"]
        assert len(a.lost) == 1
        assert "re-registered" in a.lost[0]

    def test_one_expiry_seen_by_two_callers_registers_once(
        self, daemon: Daemon, pair: tuple[S, S]
    ) -> None:
        """The heartbeat thread and a send both saw the same expiry: the second finds
        the session registered again since (its generation moved) and only retries, so
        the loss is recorded once (the race behind a flaky test)."""
        a, _ = pair
        generation = a.registration
        daemon.call("session.end", {"session_id": "a"})
        expired = SessionExpired("ended", {"session_id": "a"})

        with a._state:
            a._reg.recover(expired, generation)  # the first caller registers again
            a._reg.recover(expired, generation)  # the second, with what it saw, does not

        assert len(a.lost) == 1
        assert a.registration == generation + 1

    def test_unknown_target_is_an_error(self, pair: tuple[S, S]) -> None:
        """An unknown addressee raises UnknownSession; the sender is not re-registered."""
        a, _ = pair
        with pytest.raises(UnknownSession):
            a.send("nobody", "x")

        assert a.lost == []

    def test_not_started_is_a_no_op(self, mesh: Mesh) -> None:
        """A session that is not active sends nothing and reads nothing."""
        idle = S(
            mesh,
            _session.SessionCore(
                task="", session_id="z", liveness="heartbeat", bind=False, fields={}
            ),
        )

        assert idle.send("a", "x") is None
        assert idle.ask("a", "?") is None
        assert idle.inbox() == []
        assert not idle.on_query(lambda q: "x").running


class TestQueries:
    def test_status_responder(self, pair: tuple[S, S]) -> None:
        """No live responder: the daemon answers at once from what b reported."""
        a, _ = pair
        r = a.ask("b", "what are you doing?")

        assert r is not None
        assert (r.answered_by, r.timed_out, r.from_) == ("status", False, "b")
        assert "refactor auth" in r.answer
        assert r.to_json()["from"] == "b"

    def test_on_query_answers_live(self, pair: tuple[S, S]) -> None:
        """on_query's handler gets the framed query and its string is the answer."""
        a, b = pair
        seen: list[Query] = []

        def handler(q: Query) -> str:
            seen.append(q)
            return f"running tests (asked by {q.from_})"

        responder = b.on_query(handler)
        r = a.ask("b", "status?", timeout=30)

        assert r is not None
        assert (r.answer, r.answered_by, r.timed_out, r.from_) == (
            "running tests (asked by a)",
            "session",
            False,
            "b",
        )
        assert [(q.from_, q.text, q.request, q.session_id) for q in seen] == [
            ("a", "status?", "question", "b")
        ]
        assert "not from the user" in seen[0].framing
        # The responder counts an answer once query.answer returns to it, which can
        # be just after the asker already has the answer.
        deadline = time.monotonic() + 60
        while responder.answered < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert responder.answered == 1

    def test_silent_handler_times_out_and_the_late_answer_lands(self, pair: tuple[S, S]) -> None:
        """A handler slower than the ask: status answer, timed out; its answer then
        arrives in the asker's inbox as kind ``answer``."""
        a, b = pair
        go = threading.Event()

        def handler(q: Query) -> str:
            go.wait(10)
            return "sorry, was busy"

        b.on_query(handler)
        r = a.ask("b", "status?", timeout=0.5)
        go.set()
        late = wait_for(a.inbox)

        assert r is not None
        assert (r.answered_by, r.timed_out) == ("status", True)
        assert [(i.kind, i.from_, i.text, i.reply_to) for i in late] == [
            ("answer", "b", "sorry, was busy", r.query_id)
        ]

    def test_declining_handler_and_failing_handler_leave_it_to_status(
        self, pair: tuple[S, S]
    ) -> None:
        """None from the handler, or an exception, gives no answer: status, timed out."""
        a, b = pair
        calls: list[int] = []

        def handler(q: Query) -> str | None:
            calls.append(q.id)
            if len(calls) == 1:
                return None
            raise RuntimeError("boom")

        responder = b.on_query(handler)
        first = a.ask("b", "?", timeout=0.3)
        second = a.ask("b", "?", timeout=0.3)

        assert first is not None
        assert second is not None
        assert [(x.answered_by, x.timed_out) for x in (first, second)] == [("status", True)] * 2
        assert len(calls) == 2
        assert any("boom" in f for f in responder.failures)

    def test_responder_stops_when_the_session_ends(self, mesh: Mesh) -> None:
        """Ending the session stops its responder thread."""
        c = session(mesh, "c")
        responder = c.on_query(lambda q: "here")
        c.end()

        assert wait_for(lambda: not responder.running)

    def test_stopped_responder_means_status_again(self, pair: tuple[S, S]) -> None:
        """After Responder.stop() the status responder answers again, at once."""
        a, b = pair
        responder = b.on_query(lambda q: "live")
        live = a.ask("b", "?", timeout=30)
        responder.stop()
        after = wait_for(lambda: (r := a.ask("b", "?", timeout=0.2)) and not r.timed_out and r)

        assert live is not None
        assert live.answered_by == "session"
        assert after.answered_by == "status"

    def test_responder_comes_back_after_a_daemon_restart(
        self, daemon: Daemon, pair: tuple[S, S]
    ) -> None:
        """The responder connects and opts in again once the daemon is back."""
        a, b = pair
        responder = b.on_query(lambda q: "back")
        daemon.restart()
        # Wait for the responder to opt in again, then ask once (polling with asks
        # spent the sender's message budget on a slow machine).
        wait_for(lambda: responder.opted_in >= 2)

        r = a.ask("b", "?", timeout=30)

        assert r is not None
        assert (r.answered_by, r.answer) == ("session", "back")
        assert responder.running


class TestBroadcastAndHandoffs:
    def test_collect_with_one_live_and_one_silent(self, mesh: Mesh, pair: tuple[S, S]) -> None:
        """A collected broadcast returns b's live answer and c's status answer."""
        a, b = pair
        c = session(mesh, "c", "idle work")
        b.on_query(lambda q: "not me")
        out = a.broadcast("who uses port 8080?", collect=True, timeout=30)
        c.end()

        assert out is not None
        assert sorted(out.recipients) == ["b", "c"]
        assert {x.from_: (x.answered_by, x.answer) for x in out.answers}["b"] == (
            "session",
            "not me",
        )
        assert {x.from_: x.answered_by for x in out.answers}["c"] == "status"

    def test_plain_broadcast_and_path(self, pair: tuple[S, S]) -> None:
        """Without collect it is a message to each; --path narrows to those working there."""
        a, b = pair
        everyone = a.broadcast("deploying in 5 min")
        near = a.broadcast("touching /tmp/x", path="/tmp/x")
        got = b.inbox()

        assert everyone is not None
        assert near is not None
        assert (everyone.recipients, everyone.answers) == (["b"], [])
        assert near.recipients == ["b"]
        assert [(i.kind, i.text) for i in got] == [
            ("broadcast", "deploying in 5 min"),
            ("broadcast", "touching /tmp/x"),
        ]

    def test_handoff_write_list_and_request(self, pair: tuple[S, S]) -> None:
        """handoff() stores it; handoffs() lists it for b; request_handoff asks b's handler."""
        a, b = pair
        h = a.handoff("auth half done", to="b", files=["src/auth.py"], next_steps=["tests"])
        listed = b.handoffs()
        b.on_query(lambda q: f"handoff for {q.from_}: done" if q.request == "handoff" else "?")
        req = a.request_handoff("b", timeout=30)

        assert h is not None
        assert (h.from_, h.to, h.files, h.next_steps) == ("a", "b", ("src/auth.py",), ("tests",))
        assert [x.id for x in listed] == [h.id]
        assert req is not None
        assert (req.answered_by, req.handoff.from_, req.handoff.to) == ("session", "b", "a")
        assert req.handoff.summary == "handoff for a: done"


class TestImport:
    def test_stdlib_only_and_light(self) -> None:
        """The mixin and the messaging CLI load no heavy or start-up-costly module."""
        code = (
            "import sys, meshctl._core.messaging, meshctl.cli.messages, meshctl.cli.handoff, "
            "meshctl.cli.sync\n"
            "bad = ('anyio', 'msgspec', 'platformdirs', 'dataclasses', 'logging', 'subprocess')\n"
            "print(sorted(m for m in bad if m in sys.modules))"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)

        assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


class TestHelpers:
    def test_label_and_clip(self) -> None:
        """The frame names the sender; answers are clipped to 2 KiB on whole characters."""
        clipped = clip_answer("é" * 2000)

        assert label("a") == "[from a — another session of yours, not you]"
        assert "not from you" in label("meshd")
        assert len(clipped.encode()) <= 2048
        assert clipped.endswith("…")

    def test_item_from_wire(self) -> None:
        """Items keep the daemon's framing, or get one."""
        item = Item.from_wire(
            {
                "id": 3,
                "kind": "message",
                "from": "x",
                "text": "t",
                "created_at": "",
                "state": "queued",
            }
        )

        assert (item.id, item.from_, item.reply_to) == (3, "x", None)
        assert "x, another AI session" in item.framing
