"""Messages, queries, broadcasts, handoffs and signals across hosts (SPEC §12, docs/FLEET.md).

Real parts only: a nats-server from the wheel and one ``meshd run`` per host, each
with its own folders; clients talk to their own host's socket only.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import pytest
from tests.conftest import rpc
from tests.fleet.conftest import FleetHost, HostFactory, NatsServer
from tests.fleet.secure import FLAVOURS
from tests.support import RpcClient, wait_for


def register(h: FleetHost, sid: str, **kw: Any) -> str:
    params = {"session_id": sid, "pid": os.getpid(), "task": f"task of {sid}", **kw}
    return str(h.call("session.register", params)["session_id"])


def listed(h: FleetHost) -> set[str]:
    return {s["session_id"] for s in h.call("session.list")["sessions"]}


def everywhere(hosts: list[FleetHost], *sids: str) -> None:
    """Wait until every host's registry lists ``sids`` (the fleet registry's mirror)."""
    for h in hosts:
        wait_for(lambda h=h: set(sids) <= listed(h), 15, what=lambda h=h: f"{h.name}: {listed(h)}")


def error(h: FleetHost, method: str, params: dict[str, Any]) -> dict[str, Any]:
    reply = rpc(h.daemon.socket, method, params)
    assert "error" in reply, reply
    return dict(reply["error"])


def inbox(h: FleetHost, sid: str) -> list[dict[str, Any]]:
    return list(h.call("message.inbox", {"session_id": sid, "peek": True})["items"])


def answering(h: FleetHost, sid: str, text: str) -> tuple[RpcClient, threading.Thread]:
    """A live responder for ``sid`` on ``h`` that answers the first query with ``text``."""
    r = RpcClient(h.daemon)
    r.call("query.respond", session_id=sid)

    def run() -> None:
        line = r.file.readline()
        ev = json.loads(line)["params"]
        r.call("query.answer", session_id=sid, query_id=ev["id"], text=text)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return r, t


@pytest.fixture
def two(fleet_hosts: HostFactory) -> tuple[FleetHost, FleetHost]:
    h1, h2 = fleet_hosts(2)
    register(h1, "h1:a")
    register(h2, "h2:b", cwd="/tmp", branch="feat/x")
    everywhere([h1, h2], "h1:a", "h2:b")
    return h1, h2


class TestQueries:
    def test_answered_by_the_remote_session(self, two: tuple[FleetHost, FleetHost]) -> None:
        h1, h2 = two
        r, t = answering(h2, "h2:b", "running the tests")
        try:
            got = h1.call("query.ask", {"session_id": "h1:a", "to": "h2:b", "question": "?"})
        finally:
            t.join(60)
            r.close()

        assert (got["answer"], got["answered_by"], got["from"]) == (
            "running the tests", "session", "h2:b",
        )  # fmt: skip
        assert got["timed_out"] is False

    def test_no_responder_is_answered_by_the_remote_status_responder(
        self, two: tuple[FleetHost, FleetHost]
    ) -> None:
        h1, _ = two
        got = h1.call("query.ask", {"session_id": "h1:a", "to": "h2:b", "question": "?"})

        assert got["answered_by"] == "status"
        assert got["from"] == "h2:b"
        assert "task of h2:b" in got["answer"]
        assert "feat/x" in got["answer"]  # what h2:b reported on its own host

    def test_a_silent_responder_times_out_into_the_status_answer(
        self, two: tuple[FleetHost, FleetHost]
    ) -> None:
        h1, h2 = two
        with RpcClient(h2.daemon) as r:
            r.call("query.respond", session_id="h2:b")
            got = h1.call(
                "query.ask", {"session_id": "h1:a", "to": "h2:b", "question": "?", "timeout": 0.5}
            )
        assert (got["answered_by"], got["timed_out"]) == ("status", True)

    def test_a_late_answer_reaches_the_askers_inbox(self, two: tuple[FleetHost, FleetHost]) -> None:
        h1, h2 = two
        with RpcClient(h2.daemon) as r:
            r.call("query.respond", session_id="h2:b")
            got = h1.call(
                "query.ask", {"session_id": "h1:a", "to": "h2:b", "question": "?", "timeout": 0.3}
            )
            ev = json.loads(r.file.readline())["params"]
            late = r.call("query.answer", session_id="h2:b", query_id=ev["id"], text="sorry, late")
        assert got["timed_out"] is True
        assert late["late"] is True
        [item] = wait_for(lambda: inbox(h1, "h1:a"), 15, what="the late answer on h1")
        assert (item["kind"], item["from"], item["text"]) == ("answer", "h2:b", "sorry, late")

    def test_a_handoff_request_across_hosts_is_stored_for_the_requester(
        self, two: tuple[FleetHost, FleetHost]
    ) -> None:
        h1, h2 = two
        h2.call("handoff.write", {"session_id": "h2:b", "summary": "auth half done"})
        got = h1.call("handoff.request", {"session_id": "h1:a", "to": "h2:b", "timeout": 2})
        listed = h1.call("handoff.list", {"session_id": "h1:a"})["handoffs"]

        assert got["answered_by"] == "status"
        assert "auth half done" in got["handoff"]["summary"]
        assert (got["handoff"]["from"], got["handoff"]["to"]) == ("h2:b", "h1:a")
        assert [h["id"] for h in listed] == [got["handoff"]["id"]]

    def test_refusal_on_the_remote_host_reaches_the_asker(self, fleet_hosts: HostFactory) -> None:
        h1, h2 = fleet_hosts(2)
        register(h1, "h1:a")
        register(h2, "h2:shy", accept_queries=False)
        everywhere([h1], "h2:shy")
        err = error(h1, "query.ask", {"session_id": "h1:a", "to": "h2:shy", "question": "?"})
        assert err["data"]["code"] == "QUERY_REFUSED"

    def test_a_cycle_across_hosts_is_refused(self, two: tuple[FleetHost, FleetHost]) -> None:
        """h1:a asks h2:b; b, while answering, asks h1:a back: CYCLE on h1, from the
        chain that travelled with the ask."""
        h1, h2 = two
        seen: dict[str, Any] = {}
        r = RpcClient(h2.daemon)
        r.call("query.respond", session_id="h2:b")

        def run() -> None:
            ev = json.loads(r.file.readline())["params"]
            seen["back"] = rpc(
                h2.daemon.socket, "query.ask",
                {"session_id": "h2:b", "to": "h1:a", "question": "and you?"},
            )  # fmt: skip
            r.call("query.answer", session_id="h2:b", query_id=ev["id"], text="done")

        t = threading.Thread(target=run, daemon=True)
        t.start()
        try:
            got = h1.call("query.ask", {"session_id": "h1:a", "to": "h2:b", "question": "?"})
        finally:
            t.join(60)
            r.close()
        assert got["answer"] == "done"
        assert seen["back"]["error"]["data"]["code"] == "CYCLE"
        assert seen["back"]["error"]["data"]["chain"] == ["h1:a", "h2:b", "h1:a"]


class TestInbox:
    @pytest.mark.flavours(*FLAVOURS)
    def test_a_message_reaches_a_session_on_another_host(
        self, two: tuple[FleetHost, FleetHost]
    ) -> None:
        h1, h2 = two
        sent = h1.call("message.send", {"session_id": "h1:a", "to": "h2:b", "text": "hello"})
        assert (sent["state"], sent["host"]) == ("queued", "h2")

        items = wait_for(lambda: inbox(h2, "h2:b"), 15, what="the message on h2")
        assert [(i["from"], i["text"], i["kind"]) for i in items] == [("h1:a", "hello", "message")]
        assert "not from the user" in items[0]["framing"]

    def test_a_session_that_refuses_messages_is_told_back_as_a_notice(
        self, two: tuple[FleetHost, FleetHost]
    ) -> None:
        h1, h2 = two
        register(h2, "h2:quiet", accept_messages=False)
        everywhere([h1], "h2:quiet")
        sent = h1.call("message.send", {"session_id": "h1:a", "to": "h2:quiet", "text": "psst"})
        assert sent["state"] == "queued"
        [notice] = wait_for(lambda: inbox(h1, "h1:a"), 15, what="the notice on h1")
        assert notice["kind"] == "notice"
        assert "h2:quiet does not accept messages" in notice["text"]
        assert inbox(h2, "h2:quiet") == []

    def test_a_reply_goes_back_and_counts_its_depth(self, two: tuple[FleetHost, FleetHost]) -> None:
        h1, h2 = two
        h1.call("message.send", {"session_id": "h1:a", "to": "h2:b", "text": "ping"})
        [item] = wait_for(lambda: inbox(h2, "h2:b"), 15, what="ping on h2")
        back = h2.call(
            "message.send", {"session_id": "h2:b", "reply_to": item["id"], "text": "pong"}
        )
        assert (back["to"], back["depth"]) == ("h1:a", 2)
        [got] = wait_for(lambda: inbox(h1, "h1:a"), 15, what="pong on h1")
        assert (got["from"], got["text"]) == ("h2:b", "pong")

    def test_a_handoff_to_a_session_on_another_host(self, two: tuple[FleetHost, FleetHost]) -> None:
        h1, h2 = two
        h1.call("handoff.write", {"session_id": "h1:a", "summary": "auth done", "to": "h2:b"})
        [got] = wait_for(lambda: inbox(h2, "h2:b"), 15, what="the handoff on h2")
        assert (got["kind"], got["from"], got["text"]) == ("handoff", "h1:a", "auth done")


class TestBroadcastAndSignals:
    def test_a_broadcast_reaches_every_host(self, fleet_hosts: HostFactory) -> None:
        h1, h2, h3 = fleet_hosts(3)
        for h, sid in ((h1, "h1:a"), (h1, "h1:x"), (h2, "h2:b"), (h3, "h3:c")):
            register(h, sid)
        everywhere([h1, h2, h3], "h1:a", "h1:x", "h2:b", "h3:c")
        h1.call("broadcast.send", {"session_id": "h1:a", "text": "deploying in 5 min"})

        for h, sid in ((h1, "h1:x"), (h2, "h2:b"), (h3, "h3:c")):
            items = wait_for(lambda h=h, sid=sid: inbox(h, sid), 15, what=f"{sid}'s broadcast")
            assert [(i["kind"], i["from"], i["text"]) for i in items] == [
                ("broadcast", "h1:a", "deploying in 5 min")
            ]
        assert inbox(h1, "h1:a") == []

    def test_a_collected_broadcast_gathers_every_hosts_answers(
        self, fleet_hosts: HostFactory
    ) -> None:
        h1, h2, h3 = fleet_hosts(3)
        for h, sid in ((h1, "h1:a"), (h1, "h1:x"), (h2, "h2:b"), (h3, "h3:c")):
            register(h, sid)
        everywhere([h1, h2, h3], "h1:a", "h1:x", "h2:b", "h3:c")
        r, t = answering(h2, "h2:b", "b here, idle")
        try:
            got = h1.call(
                "broadcast.send",
                {"session_id": "h1:a", "text": "who is on auth?", "collect": True, "timeout": 30},
            )
        finally:
            t.join(60)
            r.close()

        assert sorted(got["recipients"]) == ["h1:x", "h2:b", "h3:c"]
        by = {a["from"]: (a["answered_by"], a["answer"]) for a in got["answers"]}
        assert by["h2:b"] == ("session", "b here, idle")
        assert by["h3:c"][0] == by["h1:x"][0] == "status"
        assert "task of h3:c" in by["h3:c"][1]
        [item] = inbox(h3, "h3:c")  # a session without a responder has it in its inbox
        assert (item["kind"], item["text"]) == ("broadcast", "who is on auth?")

    def test_a_signal_wakes_a_waiter_on_another_host_and_serves_a_late_one(
        self, fleet_hosts: HostFactory
    ) -> None:
        h1, h2, h3 = fleet_hosts(3)
        out: dict[str, Any] = {}

        def wait() -> None:
            out["r"] = h2.call("signal.wait", {"name": "data-ready", "timeout": 20})

        t = threading.Thread(target=wait, daemon=True)
        t.start()
        wait_for(lambda: h2.call("mesh.info").get("version"))
        h1.call("signal.emit", {"name": "data-ready", "payload": {"rows": 10}})
        t.join(60)

        assert out["r"]["received"] is True
        assert out["r"]["payload"] == {"rows": 10}
        late = wait_for(
            lambda: (
                (r := h3.call("signal.wait", {"name": "data-ready", "timeout": 0}))["received"]
                and r
            ),
            15,
            what="the signal on h3",
        )
        assert late["payload"] == {"rows": 10}


def publish(server: NatsServer, subject: str, payload: bytes, msg_ids: list[str]) -> None:
    """Publish ``payload`` once per Nats-Msg-Id, straight to JetStream (a test's nats-py)."""
    import asyncio

    import nats

    async def run() -> None:
        nc = await nats.connect(server.url, **server.client_options())
        try:
            js = nc.jetstream()
            for mid in msg_ids:
                await js.publish(subject, payload, headers={"Nats-Msg-Id": mid})
        finally:
            await nc.close()

    asyncio.run(run())


class TestFailures:
    def test_a_broadcast_path_this_host_cannot_read_reaches_no_one_and_is_taken(
        self, two: tuple[FleetHost, FleetHost], nats_server: NatsServer
    ) -> None:
        """An item whose --path is a bad key on the receiving host is taken (not
        redelivered for ever) and reaches nobody; a good path reaches its sessions."""
        h1, h2 = two
        register(h2, "h2:elsewhere", cwd="/var")
        h1.call("message.send", {"session_id": "h1:a", "to": "h2:b", "text": "first"})
        wait_for(lambda: inbox(h2, "h2:b"), 15, what="the stream to exist and h2 to read it")
        bad = {
            "key": "h9:bad-path", "kind": "broadcast", "sender": "h9:z", "from_host": "h9",
            "created_at": 0.0, "text": "nobody", "path": "not/absolute",
        }  # fmt: skip
        publish(nats_server, "mesh.test.mail._x2a_all", json.dumps(bad).encode(), ["b1"])
        h1.call("broadcast.send", {"session_id": "h1:a", "text": "tmp only", "path": "/tmp"})

        def texts(sid: str) -> list[str]:
            return [i["text"] for i in inbox(h2, sid)]

        wait_for(lambda: "tmp only" in texts("h2:b"), 15, what=lambda: texts("h2:b"))
        wait_for(lambda: h2.status()["parts"]["mail"]["taken"] == 3, 15,
                 what=lambda: h2.status()["parts"]["mail"])  # fmt: skip
        assert texts("h2:b") == ["first", "tmp only"]
        assert texts("h2:elsewhere") == []

    def test_a_copy_past_the_duplicate_window_is_dropped_by_its_key(
        self, two: tuple[FleetHost, FleetHost], nats_server: NatsServer
    ) -> None:
        """The same item twice on the stream (as after a re-publish later than JetStream's
        duplicate window): h2 takes it once, by the key the item carries."""
        h1, h2 = two
        h1.call("message.send", {"session_id": "h1:a", "to": "h2:b", "text": "first"})
        wait_for(lambda: inbox(h2, "h2:b"), 15, what="the stream to exist and h2 to read it")
        item = {
            "key": "h9:feedface", "kind": "message", "sender": "h9:z", "from_host": "h9",
            "created_at": 0.0, "to": "h2:b", "text": "once",
        }  # fmt: skip
        publish(nats_server, "mesh.test.mail.h2", json.dumps(item).encode(), ["x1", "x2"])

        def texts() -> list[str]:
            return [i["text"] for i in inbox(h2, "h2:b")]

        wait_for(lambda: h2.status()["parts"]["mail"]["duplicates_dropped"] == 1, 15,
                 what=lambda: f"{h2.status()['parts']['mail']}: {texts()}")  # fmt: skip
        assert texts() == ["first", "once"]

    @pytest.mark.slow
    def test_nats_kill_9_loses_nothing_acknowledged_and_repeats_nothing(
        self, two: tuple[FleetHost, FleetHost], nats_server: NatsServer
    ) -> None:
        """Sends before, during and after a kill -9 of nats-server: every one that was
        acknowledged arrives on h2 exactly once."""
        h1, h2 = two
        sent = []
        for i in range(30):
            if i == 10:
                nats_server.kill()
            if i == 20:
                nats_server.start()
            r = h1.call("message.send", {"session_id": "h1:a", "to": "h2:b", "text": f"m{i}"})
            sent.append(r)

        def arrived() -> list[str]:
            items = h2.call("message.inbox", {"session_id": "h2:b", "peek": True, "limit": 200})
            return [i["text"] for i in items["items"]]

        wait_for(lambda: len(arrived()) >= 30, 30, what=lambda: f"arrived: {arrived()}")
        assert sorted(arrived()) == sorted(f"m{i}" for i in range(30))

    @pytest.mark.slow
    def test_receiver_killed_between_store_and_ack_takes_nothing_twice(
        self, two: tuple[FleetHost, FleetHost]
    ) -> None:
        """h2's meshd dies mid-stream (kill -9): what it stored but had not acked comes
        again from the stream and is dropped by its key."""
        h1, h2 = two
        for i in range(20):
            h1.call("message.send", {"session_id": "h1:a", "to": "h2:b", "text": f"m{i}"})
        h2.daemon.kill()
        for i in range(20, 30):
            h1.call("message.send", {"session_id": "h1:a", "to": "h2:b", "text": f"m{i}"})
        h2.daemon.start()
        register(h2, "h2:b")
        h2.wait_connected()
        everywhere([h1], "h2:b")

        def arrived() -> list[str]:
            items = h2.call("message.inbox", {"session_id": "h2:b", "peek": True, "limit": 200})
            return [i["text"] for i in items["items"]]

        wait_for(lambda: len(arrived()) >= 30, 30, what=lambda: f"arrived: {arrived()}")
        assert sorted(arrived()) == sorted(f"m{i}" for i in range(30))

    @pytest.mark.slow
    def test_partition_queues_sends_fails_asks_and_heals_without_duplicates(
        self, two: tuple[FleetHost, FleetHost]
    ) -> None:
        h1, h2 = two
        h1.cut()
        wait_for(lambda: not h1.connected(), 15, what="h1 to notice the cut")

        sent = h1.call("message.send", {"session_id": "h1:a", "to": "h2:b", "text": "while cut"})
        err = error(h1, "query.ask", {"session_id": "h1:a", "to": "h2:b", "question": "?"})
        register(h1, "h1:local")
        local = h1.call("message.send", {"session_id": "h1:a", "to": "h1:local", "text": "hi"})

        assert sent["state"] == "queued"
        assert err["data"]["code"] == "UNAVAILABLE"
        assert "h2" in err["message"]
        assert local["host"] is None
        assert inbox(h1, "h1:local")
        assert h1.status()["parts"]["mail"]["outbox"] == 1
        assert "mail for other hosts not sent yet: 1 items" in h1.status()["local_only"]

        h1.heal()
        h1.wait_connected()
        items = wait_for(lambda: inbox(h2, "h2:b"), 15, what="the queued message on h2")
        assert [i["text"] for i in items] == ["while cut"]
        wait_for(lambda: h1.status()["parts"]["mail"]["outbox"] == 0, 15, what="outbox empty")
        assert [i["text"] for i in inbox(h2, "h2:b")] == ["while cut"]

    @pytest.mark.slow
    def test_a_long_cut_still_queues_to_the_last_known_host(self, fleet_hosts: HostFactory) -> None:
        """Cut long enough for h1's registry to drop h2: a send to h2:b still goes to
        h2's outbox (the last picture before the cut), a broadcast and a signal made
        while cut too; after the heal h2 has each exactly once."""
        h1, h2 = fleet_hosts(2, extra="[defaults]\nheartbeat_interval = 1\n")
        register(h1, "h1:a")
        register(h2, "h2:b")
        everywhere([h1, h2], "h1:a", "h2:b")
        h1.cut()
        wait_for(lambda: "h2:b" not in listed(h1), 30, what="h1's registry to drop h2:b")

        sent = h1.call("message.send", {"session_id": "h1:a", "to": "h2:b", "text": "late"})
        h1.call("broadcast.send", {"session_id": "h1:a", "text": "all hands"})
        h1.call("signal.emit", {"name": "cut-done", "session_id": "h1:a"})
        assert (sent["state"], sent["host"]) == ("queued", "h2")
        assert h1.status()["parts"]["mail"]["outbox"] == 3

        h1.heal()
        h1.wait_connected()

        def texts() -> list[tuple[str, str]]:
            return sorted((i["kind"], i["text"]) for i in inbox(h2, "h2:b"))

        want = [("broadcast", "all hands"), ("message", "late")]
        wait_for(lambda: texts() == want, 30, what=lambda: f"h2:b has {texts()}")
        got = h2.call("signal.wait", {"name": "cut-done", "timeout": 15})
        assert (got["received"], got["emitted_by"]) == (True, "h1:a")
        wait_for(lambda: h1.status()["parts"]["mail"]["outbox"] == 0, 15, what="outbox empty")
        assert texts() == want
