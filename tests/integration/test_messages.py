"""Messages, queries, broadcasts and handoffs against a real daemon on a real socket."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest

DaemonHandle = Any  # the conftest fixture (tests are imported with importlib mode)


class Client:
    """One persistent JSON-RPC connection (stdlib), events kept apart from replies."""

    def __init__(self, d: DaemonHandle) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(15)
        self.sock.connect(str(d.socket))
        self.file = self.sock.makefile("rb")
        self.ids = 0
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def send(self, method: str, params: dict[str, Any]) -> int:
        with self.lock:
            self.ids += 1
            rid = self.ids
            req = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
            self.sock.sendall(json.dumps(req).encode() + b"\n")
        return rid

    def read(self) -> dict[str, Any]:
        line = self.file.readline()
        assert line, "connection closed"
        doc: dict[str, Any] = json.loads(line)
        return doc

    def reply(self, rid: int) -> dict[str, Any]:
        while True:
            msg = self.read()
            if msg.get("method") == "event":
                self.events.append(msg["params"])
            elif msg.get("id") == rid:
                return msg

    def call(self, method: str, **params: Any) -> Any:
        msg = self.reply(self.send(method, params))
        if "error" in msg:
            raise RpcError(msg["error"])
        return msg["result"]

    def next_event(self) -> dict[str, Any]:
        if self.events:
            return self.events.pop(0)
        msg = self.read()
        assert msg.get("method") == "event", msg
        params: dict[str, Any] = msg["params"]
        return params

    def close(self) -> None:
        self.file.close()
        self.sock.close()


class RpcError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error["message"])
        self.code = error["data"]["code"]


def register(c: Client, sid: str, **kw: Any) -> str:
    return str(
        c.call(
            "session.register",
            session_id=sid,
            source="cli",
            pid=os.getpid(),
            liveness="process",
            **kw,
        )["session_id"]
    )


@pytest.fixture
def c(daemon: DaemonHandle) -> Any:
    cl = Client(daemon)
    register(cl, "a")
    register(cl, "b", task="refactor auth", cwd="/tmp", branch="feat/auth")
    yield cl
    cl.close()


def responder(
    daemon: DaemonHandle, sid: str, answer: Callable[[Client, dict[str, Any]], None]
) -> tuple[Client, threading.Thread]:
    r = Client(daemon)
    r.call("query.respond", session_id=sid)

    def run() -> None:
        try:
            ev = r.next_event()
            answer(r, ev)
        except (OSError, AssertionError):
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return r, t


class TestMessages:
    def test_send_peek_ack_and_history(self, c: Client) -> None:
        """A message waits queued; a peek delivers it; an ack reads it; --all still lists it."""
        sent = c.call("message.send", session_id="a", to="b", text="conclusion is X")
        peek = c.call("message.inbox", session_id="b", peek=True)["items"]
        state_before = c.call("message.status", session_id="a", ids=[sent["id"]])
        acked = c.call("message.ack", session_id="b", ids=[sent["id"]])
        unread = c.call("message.inbox", session_id="b")["items"]
        history = c.call("message.inbox", session_id="b", all=True)["items"]

        assert sent["state"] == "queued"
        assert [(i["from"], i["text"], i["state"]) for i in peek] == [
            ("a", "conclusion is X", "delivered")
        ]
        assert "not from the user" in peek[0]["framing"]
        assert state_before["states"] == {str(sent["id"]): "delivered"}
        assert acked["acked"] == [sent["id"]]
        assert unread == []
        assert [(i["id"], i["state"]) for i in history] == [(sent["id"], "read")]

    def test_reply_without_to_goes_back(self, c: Client) -> None:
        """A reply names only the message; the daemon sends it to the other party."""
        first = c.call("message.send", session_id="a", to="b", text="q")
        c.call("message.inbox", session_id="b")
        back = c.call("message.send", session_id="b", text="a", reply_to=first["id"])

        assert (back["to"], back["depth"]) == ("a", 2)

    def test_subscriber_gets_the_push_and_it_is_delivered(
        self, daemon: DaemonHandle, c: Client
    ) -> None:
        """A follower gets new messages pushed, framed, and they count as delivered."""
        f = Client(daemon)
        f.call("events.subscribe", session_id="b")
        sent = c.call("message.send", session_id="a", to="b", text="hi")
        ev = f.next_event()
        f.close()

        assert (ev["kind"], ev["from"], ev["session_id"], ev["text"]) == ("message", "a", "b", "hi")
        assert "not from the user" in ev["framing"]
        assert sent["state"] == "delivered"

    def test_refusals(self, c: Client) -> None:
        """accept_messages=false, too large and over budget are refused with their codes."""
        register(c, "quiet", accept_messages=False, accept_queries=False)
        codes = []
        for method, params in [
            ("message.send", dict(session_id="a", to="quiet", text="x")),
            ("query.ask", dict(session_id="a", to="quiet", question="x")),
            ("message.send", dict(session_id="a", to="b", text="x" * 9000)),
        ]:
            with pytest.raises(RpcError) as err:
                c.call(method, **params)
            codes.append(err.value.code)

        assert codes == ["MESSAGE_REFUSED", "QUERY_REFUSED", "TOO_LARGE"]

    def test_budget(self, c: Client) -> None:
        """The 31st message within a minute is BUDGET_EXCEEDED."""
        for _ in range(30):
            c.call("message.send", session_id="a", to="b", text="x")
        with pytest.raises(RpcError) as err:
            c.call("message.send", session_id="a", to="b", text="x")

        assert err.value.code == "BUDGET_EXCEEDED"

    def test_survive_restart(self, daemon: DaemonHandle, c: Client) -> None:
        """Unread messages and handoffs are there after a daemon restart."""
        sent = c.call("message.send", session_id="a", to="b", text="durable")
        h = c.call("handoff.write", session_id="a", summary="notes")
        c.close()
        daemon.restart()
        c2 = Client(daemon)
        register(c2, "b")
        items = c2.call("message.inbox", session_id="b", peek=True)["items"]
        shown = c2.call("handoff.show", id=h["id"])
        c2.close()

        assert [i["id"] for i in items] == [sent["id"]]
        assert shown["summary"] == "notes"


class TestQueries:
    def test_status_responder(self, c: Client) -> None:
        """Without a live responder the daemon answers from what the session reported."""
        r = c.call("query.ask", session_id="a", to="b", question="what are you doing?")

        assert (r["answered_by"], r["timed_out"], r["from"]) == ("status", False, "b")
        assert "refactor auth" in r["answer"]

    def test_a_process_session_s_status_answer_says_it_runs_not_when_last_heard(
        self, c: Client
    ) -> None:
        """SPEC §4: a ``process`` session is alive exactly as long as its process and
        never stale; listings show how long it has been idle instead. The status answer
        said "Last heard from N s ago." of it, which reads as "maybe gone" for a session
        whose process the daemon watches; a heartbeat session's answer still says it."""
        c.call("session.register", session_id="hb", source="cli", liveness="heartbeat")
        proc = c.call("query.ask", session_id="a", to="b", question="what are you doing?")
        beat = c.call("query.ask", session_id="a", to="hb", question="what are you doing?")

        assert "Last heard from" not in proc["answer"], proc
        assert "Alive: its process is running; idle for " in proc["answer"], proc
        assert "Last heard from " in beat["answer"], beat

    def test_live_answer(self, daemon: DaemonHandle, c: Client) -> None:
        """A live responder gets the query as an event and its answer is returned."""

        def answer(r: Client, ev: dict[str, Any]) -> None:
            r.call(
                "query.answer",
                session_id="b",
                query_id=ev["id"],
                text=f"running tests ({ev['from']})",
            )

        rc, t = responder(daemon, "b", answer)
        r = c.call("query.ask", session_id="a", to="b", question="status?", timeout=30)
        t.join(30)
        rc.close()

        assert (r["answered_by"], r["timed_out"], r["answer"]) == (
            "session",
            False,
            "running tests (a)",
        )

    def test_silent_responder_times_out_then_late_answer(
        self, daemon: DaemonHandle, c: Client
    ) -> None:
        """A silent responder yields the status answer, timed out; its late answer lands in the inbox."""
        got: list[dict[str, Any]] = []
        rc, t = responder(daemon, "b", lambda r, ev: got.append(ev))
        r = c.call("query.ask", session_id="a", to="b", question="status?", timeout=1)
        t.join(30)
        late = rc.call("query.answer", session_id="b", query_id=got[0]["id"], text="sorry, busy")
        items = c.call("message.inbox", session_id="a")["items"]
        rc.close()

        assert (r["answered_by"], r["timed_out"]) == ("status", True)
        assert r["elapsed_s"] >= 1.0  # it waited the live responder's whole timeout
        assert late["late"] is True
        assert [(i["kind"], i["from"], i["text"]) for i in items] == [
            ("answer", "b", "sorry, busy")
        ]

    def test_a_status_answer_from_the_frontend_is_marked_status(
        self, daemon: DaemonHandle, c: Client
    ) -> None:
        """A frontend answering for a session whose model cannot answer (waiting for its
        user, no mesh tools) says so with by=status: the asker reads answered_by status,
        not a session answer; a late status answer fills no inbox."""
        got: list[dict[str, Any]] = []

        def answer(r: Client, ev: dict[str, Any]) -> None:
            got.append(ev)
            r.call("query.answer", session_id="b", query_id=ev["id"], by="status",
                   text="b is waiting-for-user: refactor auth")  # fmt: skip

        rc, t = responder(daemon, "b", answer)
        r = c.call("query.ask", session_id="a", to="b", question="status?", timeout=30)
        t.join(30)
        late: list[dict[str, Any]] = []
        rc2, t2 = responder(daemon, "b", lambda r2, ev: late.append(ev))
        c.call("query.ask", session_id="a", to="b", question="again?", timeout=0.5)
        t2.join(30)
        after = rc2.call("query.answer", session_id="b", query_id=late[0]["id"], by="status",
                         text="b is waiting-for-user")  # fmt: skip
        items = c.call("message.inbox", session_id="a")["items"]
        rc.close()
        rc2.close()

        assert (r["answered_by"], r["timed_out"]) == ("status", False)
        assert r["answer"] == "b is waiting-for-user: refactor auth"
        assert after["late"] is False
        assert items == []

    def test_follower_is_not_a_responder(self, daemon: DaemonHandle, c: Client) -> None:
        """Subscribing to events does not make a connection the session's responder."""
        f = Client(daemon)
        f.call("events.subscribe", session_id="b")
        r = c.call("query.ask", session_id="a", to="b", question="?", timeout=5)
        f.close()

        assert (r["answered_by"], r["timed_out"]) == ("status", False)

    def test_real_cycle_between_two_responders(self, daemon: DaemonHandle, c: Client) -> None:
        """B, answering A, asks A back: the daemon refuses with CYCLE."""
        seen: list[str] = []

        def answer(r: Client, ev: dict[str, Any]) -> None:
            try:
                r.call("query.ask", session_id="b", to="a", question="why do you ask?", timeout=1)
            except RpcError as exc:
                seen.append(exc.code)
            r.call("query.answer", session_id="b", query_id=ev["id"], text="ok")

        ra = Client(daemon)
        ra.call("query.respond", session_id="a")
        rb, t = responder(daemon, "b", answer)
        r = c.call("query.ask", session_id="a", to="b", question="?", timeout=30)
        t.join(30)
        ra.close()
        rb.close()

        assert seen == ["CYCLE"]
        assert r["answer"] == "ok"

    def test_responder_gone_means_status(self, daemon: DaemonHandle, c: Client) -> None:
        """When the responder's connection closes, the status responder answers again."""
        rc = Client(daemon)
        rc.call("query.respond", session_id="b")
        rc.close()
        for _ in range(20):  # the close reaches the daemon on its own schedule
            r = c.call("query.ask", session_id="a", to="b", question="?", timeout=0.1)
            if not r["timed_out"]:
                break

        assert (r["answered_by"], r["timed_out"]) == ("status", False)

    def test_the_askers_reply_goes_before_the_answers_own(
        self, daemon: DaemonHandle, c: Client
    ) -> None:
        """An ask answered in time is replied to before the ``query.answer`` that answered
        it (the asker is the one waiting): one connection asks as a and answers as b."""
        c.call("query.respond", session_id="b")
        ask = c.send("query.ask", {"session_id": "a", "to": "b", "question": "?", "timeout": 10})
        ev = c.next_event()
        ans = c.send("query.answer", {"session_id": "b", "query_id": ev["id"], "text": "here"})
        first, second = c.read(), c.read()

        assert (first["id"], first["result"]["answer"]) == (ask, "here")
        assert (second["id"], second["result"]["query_id"], second["result"]["late"]) == (
            ans,
            ev["id"],
            False,
        )

    def test_asks_in_a_batch_and_pipelined(self, daemon: DaemonHandle, c: Client) -> None:
        """A waiting ask holds up neither the connection nor its batch's other elements;
        the batch is answered as one array once the ask is."""
        got: list[dict[str, Any]] = []
        rc, t = responder(daemon, "b", lambda r, ev: got.append(ev))
        batch = [
            {"jsonrpc": "2.0", "id": 1, "method": "query.ask",
             "params": {"session_id": "a", "to": "b", "question": "?", "timeout": 10}},
            {"jsonrpc": "2.0", "id": 2, "method": "mesh.ping"},
        ]  # fmt: skip
        c.sock.sendall(json.dumps(batch).encode() + b"\n")
        assert c.call("mesh.ping") is not None  # served while the batch's ask waits
        t.join(60)
        rc.call("query.answer", session_id="b", query_id=got[0]["id"], text="done")
        replies = json.loads(c.file.readline())
        rc.close()

        assert [r["id"] for r in replies] == [1, 2]
        assert (replies[0]["result"]["answered_by"], replies[0]["result"]["answer"]) == (
            "session",
            "done",
        )

    def test_asker_gone_before_the_answer(self, daemon: DaemonHandle, c: Client) -> None:
        """The asker's connection closes while its ask waits: the answer that comes later
        is taken (not late: nobody waits for it), and the daemon goes on serving asks."""
        got: list[dict[str, Any]] = []
        rc, t = responder(daemon, "b", lambda r, ev: got.append(ev))
        asker = Client(daemon)
        asker.send("query.ask", {"session_id": "a", "to": "b", "question": "?", "timeout": 30})
        t.join(60)
        asker.close()
        c.call("mesh.ping")  # ordering: the close is seen by the daemon on its own schedule
        late = rc.call("query.answer", session_id="b", query_id=got[0]["id"], text="too late?")
        again = c.call("query.ask", session_id="b", to="a", question="?", timeout=5)
        rc.close()

        assert (late["query_id"], late["late"]) == (got[0]["id"], False)
        assert (again["answered_by"], again["timed_out"]) == ("status", False)

    def test_target_ends_while_asked(self, daemon: DaemonHandle, c: Client) -> None:
        """The target session ends while its responder has the question: the ask answers
        at once with the status answer, not timed out."""
        got: list[dict[str, Any]] = []
        rc, t = responder(daemon, "b", lambda r, ev: got.append(ev))
        rid = c.send("query.ask", {"session_id": "a", "to": "b", "question": "?", "timeout": 30})
        t.join(60)
        other = Client(daemon)
        other.call("session.end", session_id="b")
        r = c.reply(rid)["result"]
        other.close()
        rc.close()

        assert len(got) == 1
        assert (r["answered_by"], r["timed_out"], r["from"], r["answer"]) == (
            "status",
            False,
            "b",
            "b has ended.",
        )


class TestBroadcastAndHandoffs:
    def test_collect_mixes_live_and_silent(self, daemon: DaemonHandle, c: Client) -> None:
        """A collected broadcast returns the live answer and status answers for the rest."""
        register(c, "c3")

        def answer(r: Client, ev: dict[str, Any]) -> None:
            r.call("query.answer", session_id="b", query_id=ev["id"], text="not me")

        rc, t = responder(daemon, "b", answer)
        out = c.call(
            "broadcast.send", session_id="a", text="who uses port 8080?", collect=True, timeout=30
        )
        t.join(30)
        rc.close()

        got = {a["from"]: a["answered_by"] for a in out["answers"]}
        assert got == {"b": "session", "c3": "status"}
        assert sorted(out["recipients"]) == ["b", "c3"]

    def test_broadcast_to_many_gives_each_its_own_item(
        self, daemon: DaemonHandle, c: Client
    ) -> None:
        """A broadcast to many sessions, half of them subscribed: each recipient gets one
        item with an id of its own (pushed once to a subscriber and delivered; queued for
        the rest), a session refusing messages gets nothing, and every item is durable
        as it was acknowledged (the same inboxes after kill -9)."""
        sids = [f"r{i:02d}" for i in range(40)]
        for sid in sids:
            register(c, sid, accept_messages=sid != "r04")
        subs = {sid: Client(daemon) for sid in sids[::2]}
        for sid, sc in subs.items():
            assert sc.call("events.subscribe", session_id=sid)["unread"] == 0
        out = c.call("broadcast.send", session_id="a", text='rebasing "main" \u00e9')
        ids = dict(zip(out["recipients"], out["message_ids"], strict=True))
        for sc in subs.values():
            sc.call("mesh.ping")  # every event pushed before the broadcast's reply is in
        pushed = {sid: sc.events for sid, sc in subs.items()}
        states = c.call("message.status", session_id="a", ids=list(ids.values()))["states"]
        inboxes = {sid: c.call("message.inbox", session_id=sid, peek=True) for sid in ["b", *sids]}
        for sc in subs.values():
            sc.close()
        daemon.kill()
        daemon.start()
        c2 = Client(daemon)
        after = {sid: c2.call("message.inbox", session_id=sid, peek=True)["items"] for sid in ids}
        c2.close()

        assert sorted(ids) == sorted(["b", *sids[:4], *sids[5:]])
        assert out["skipped"] == {"r04": "does not accept messages"}
        assert len(set(ids.values())) == len(ids)
        for sid, events in pushed.items():
            if sid == "r04":
                assert events == []
                continue
            assert [(e["kind"], e["session_id"], e["to"], e["id"], e["from"]) for e in events] == [
                ("broadcast", sid, sid, ids[sid], "a")
            ]
            assert (events[0]["state"], events[0]["text"]) == ("delivered", 'rebasing "main" é')
        for sid, inbox in inboxes.items():
            want = [] if sid == "r04" else [(ids[sid], "a", "broadcast")]
            assert [(i["id"], i["from"], i["kind"]) for i in inbox["items"]] == want
            assert inbox["unread"] == len(want)
        assert states == {
            str(i): "delivered" if sid in subs else "queued" for sid, i in ids.items()
        }
        assert after == {sid: inboxes[sid]["items"] for sid in ids}

    def test_path_broadcast(self, c: Client) -> None:
        """--path reaches only sessions whose cwd overlaps it."""
        out = c.call("broadcast.send", session_id="a", text="touching /tmp/x", path="/tmp/x")

        assert out["recipients"] == ["b"]

    def test_handoffs(self, c: Client) -> None:
        """write, list (mine/unaddressed vs all), request, and end --handoff."""
        register(c, "c3")
        c.call("handoff.write", session_id="a", summary="for b", to="b", next_steps=["test"])
        c.call("handoff.write", session_id="a", summary="c3 only", to="c3")
        mine = c.call("handoff.list", session_id="b")["handoffs"]
        every = c.call("handoff.list", all=True)["handoffs"]
        req = c.call("handoff.request", session_id="a", to="b")
        end = c.call("session.end", session_id="c3", handoff="bye")
        status = c.call("query.ask", session_id="b", to="a", question="?")

        assert [h["summary"] for h in mine] == ["for b"]
        assert len(every) == 2
        assert (req["answered_by"], req["handoff"]["from"], req["handoff"]["to"]) == (
            "status",
            "b",
            "a",
        )
        assert end["handoff_id"] is not None
        assert "c3 only" not in status["answer"]
