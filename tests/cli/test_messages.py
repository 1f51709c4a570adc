"""``meshctl send/inbox/reply/broadcast/sessions ask/handoff/sync`` (SPEC §6, §9).

Each command runs as a real subprocess against the real daemon: ``python -c BOOT``
runs the real ``cli`` (the root group loads each command by name). Live responders
are the library's ``on_query`` threads, or ``inbox --follow --respond`` subprocesses.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from meshctl import Mesh
from meshctl._core import session as _session
from meshctl._core.messaging import Query
from meshctl._sync.session import Session
from meshctl.cli import _time
from meshctl.cli.handoff import expand_variadic
from meshctl.cli.messages import render_answer, render_event, render_item

from .conftest import Run

Daemon = Any

BOOT = """
import sys
from meshctl.cli import cli
sys.argv[0] = "meshctl"
cli.main(prog_name="meshctl")
"""


def mc(daemon: Daemon, *args: str, session: str | None = None) -> Run:
    """``meshctl ARGS`` acting for ``session`` (MESH_SESSION), waited for."""
    env = dict(daemon.env)
    if session is not None:
        env["MESH_SESSION"] = session
    done = subprocess.run(
        [sys.executable, "-c", BOOT, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Run(list(args), done.returncode, done.stdout, done.stderr)


def ok(run: Run) -> Run:
    assert run.code == 0, run
    return run


def register(daemon: Daemon, sid: str, task: str = "t", *extra: str) -> str:
    """A process session tied to this test process, registered with the real CLI."""
    args = ("register", "--task", task, "--id", sid, "--pid", str(os.getpid()), *extra)
    return ok(mc(daemon, *args)).out.strip()


class Follower:
    """A long-running ``meshctl inbox --follow`` whose output is read line by line."""

    def __init__(self, daemon: Daemon, session: str, *args: str) -> None:
        env = {**daemon.env, "MESH_SESSION": session}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", BOOT, "inbox", "--follow", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out: queue.Queue[str] = queue.Queue()
        self.err: queue.Queue[str] = queue.Queue()
        self.pumps = [
            threading.Thread(target=self._pump, args=(stream, q), daemon=True)
            for stream, q in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))
        ]
        for t in self.pumps:
            t.start()

    @staticmethod
    def _pump(stream: Any, q: queue.Queue[str]) -> None:
        for line in stream:
            q.put(line)

    def line(self, q: queue.Queue[str] | None = None, timeout: float = 60.0) -> str:
        """The next line (stdout by default); fails when none comes within ``timeout``."""
        try:
            return (q or self.out).get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line within {timeout} s; exit {self.proc.poll()}") from None

    def ready(self) -> None:
        """Wait for the note on stderr that says the follower has subscribed."""
        assert "following the inbox" in self.line(self.err)

    def stop(self) -> None:
        """Terminate it (if still running), then close its pipes once read to the end."""
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=10)
        for t in self.pumps:
            t.join(10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


S = Session


@pytest.fixture
def mesh(daemon: Daemon) -> Iterator[Mesh]:
    with Mesh(socket=daemon.socket, autostart=False) as m:
        yield m


def live(mesh: Mesh, sid: str, task: str = "") -> S:
    core = _session.SessionCore(
        task=task, session_id=sid, liveness="heartbeat", bind=False, fields={}
    )
    return S(mesh, core).start()


# --- pure parts ---------------------------------------------------------------------------


class TestRendering:
    def test_item_is_framed(self) -> None:
        """An item names its sender as another session of the user, then the text indented."""
        text = render_item(
            {
                "id": 7,
                "kind": "message",
                "from": "a",
                "text": "x\ny",
                "created_at": _time.rfc3339(time.time() - 150),
                "reply_to": 3,
            }
        )

        assert text == (
            "#7 [from a — another session of yours, not you] message, reply to #3, 2m ago:"
            "\n    x\n    y"
        )

    def test_answer_says_who_answered(self) -> None:
        """Live, status and timed-out answers read differently."""
        base = {"answer": "busy", "from": "b", "elapsed_s": 1.0}
        live_ = render_answer({**base, "answered_by": "session", "timed_out": False}, "b")
        status = render_answer({**base, "answered_by": "status", "timed_out": False}, "b")
        late = render_answer({**base, "answered_by": "status", "timed_out": True}, "b")

        assert "answered live by b" in live_
        assert "status responder (b has no live responder)" in status
        assert late.startswith("[from b — another session of yours, not you] timed out after")

    def test_claim_notice_reads_as_the_daemons(self) -> None:
        """A pushed claim notice is framed as the daemon's, in one line."""
        event = {"session_id": "a", "kind": "claim.stolen", "resources": ["port:8080"], "token": 4}
        text = render_event({**event, "by": "b", "reason": "deploy", "framing": "…"})

        assert text == (
            "[from the mesh daemon — a notice about your sessions, not from you] "
            "claim stolen port:8080 (token 4) by b — deploy"
        )

    def test_release_notice_says_released_once(self) -> None:
        """``claim.released`` (how: released) reads "claim released …", not "… released"."""
        event = {"session_id": "a", "kind": "claim.released", "resources": ["res:r"], "token": 5}
        text = render_event({**event, "how": "released", "at": "2026-12-01T00:00:00Z"})

        assert text.endswith("] claim released res:r (token 5)")

    def test_variadic_options(self) -> None:
        """--files/--next take values up to the next option; nothing moves after --."""
        args = ["did X", "--files", "a.py", "b.py", "--branch", "m", "--next", "t", "--", "--files"]

        assert expand_variadic(args) == [
            *("did X", "--files", "a.py", "--files", "b.py", "--branch", "m", "--next", "t"),
            *("--", "--files"),
        ]
        assert expand_variadic(["x", "--files"]) == ["x", "--files"]


# --- against the daemon -------------------------------------------------------------------


class TestSendInboxReply:
    def test_send_inbox_reply(self, daemon: Daemon) -> None:
        """a sends, b reads (framed; marked read), b replies by id, a gets it linked."""
        register(daemon, "a")
        register(daemon, "b")
        sent = ok(mc(daemon, "send", "b", "conclusion", "is", "X", session="a"))
        read = ok(mc(daemon, "inbox", session="b"))
        again = ok(mc(daemon, "inbox", session="b"))
        msg_id = sent.out.split("#")[1].split()[0]
        replied = ok(mc(daemon, "reply", msg_id, "thanks", session="b"))
        got = ok(mc(daemon, "inbox", "--json", session="a")).json()

        assert sent.out == f"Sent #{msg_id} to b (queued).\n"
        assert read.out.startswith(
            f"#{msg_id} [from a — another session of yours, not you] message"
        )
        assert "    conclusion is X" in read.out
        assert again.out == "No unread items for b.\n"
        assert replied.out.startswith(f"Replied to #{msg_id}: sent #")
        assert [(i["from"], i["text"], i["reply_to"], i["kind"]) for i in got] == [
            ("b", "thanks", int(msg_id), "message")
        ]
        assert "not from the user" in got[0]["framing"]

    def test_peek_leaves_unread(self, daemon: Daemon) -> None:
        """--peek prints without marking read; the next inbox still has it."""
        register(daemon, "a")
        register(daemon, "b")
        ok(mc(daemon, "send", "b", "hi", session="a"))
        peeked = ok(mc(daemon, "inbox", "--peek", "--json", session="b")).json()
        still = ok(mc(daemon, "inbox", "--json", session="b")).json()
        history = ok(mc(daemon, "inbox", "--all", "--json", session="b")).json()

        assert [(i["text"], i["state"]) for i in peeked] == [("hi", "delivered")]
        assert [(i["text"], i["state"]) for i in still] == [("hi", "read")]
        assert [(i["text"], i["state"]) for i in history] == [("hi", "read")]
        assert set(peeked[0]) >= {"id", "kind", "from", "text", "created_at", "state", "reply_to"}

    def test_acting_commands_need_a_session(self, daemon: Daemon) -> None:
        """send, inbox, reply, ask, broadcast, handoff write, sync refuse without a session."""
        runs = [
            mc(daemon, *args, "--json")
            for args in (
                ("send", "b", "x"),
                ("inbox",),
                ("reply", "1", "x"),
                ("sessions", "ask", "b", "?"),
                ("broadcast", "x"),
                ("handoff", "write", "x"),
                ("handoff", "list"),
                ("sync",),
            )
        ]

        assert [(r.code, r.json()["error"]["data"]["code"]) for r in runs] == [
            (1, "NO_SESSION")
        ] * len(runs)
        assert all("MESH_SESSION=$(meshctl register" in r.err for r in runs)

    def test_reply_to_nothing(self, daemon: Daemon) -> None:
        """An id that is neither an open query nor a message is NOT_FOUND, with a hint."""
        register(daemon, "a")
        run = mc(daemon, "reply", "999", "x", "--json", session="a")

        assert run.code == 1
        assert run.json()["error"]["data"]["code"] == "NOT_FOUND"
        assert "meshctl inbox --all" in run.err


class TestAsk:
    def test_status_answer(self, daemon: Daemon) -> None:
        """No live responder: the status responder answers, exit 0, SPEC §9 shape."""
        register(daemon, "a")
        register(daemon, "b", "refactor auth")
        doc = ok(mc(daemon, "sessions", "ask", "b", "what", "now?", "--json", session="a")).json()
        human = ok(mc(daemon, "sessions", "ask", "b", "what now?", session="a"))

        assert set(doc) >= {"answer", "answered_by", "timed_out", "from", "elapsed_s"}
        assert (doc["answered_by"], doc["timed_out"], doc["from"]) == ("status", False, "b")
        assert "refactor auth" in doc["answer"]
        assert human.out.startswith(
            "[from b — another session of yours, not you] answered by the status responder"
        )

    def test_live_answer(self, daemon: Daemon, mesh: Mesh) -> None:
        """A library on_query responder answers; the CLI says b answered live."""
        register(daemon, "a")
        b = live(mesh, "b")
        b.on_query(lambda q: f"running tests, {q.from_}")
        run = ok(mc(daemon, "sessions", "ask", "b", "status?", "--timeout", "30", session="a"))
        b.end()

        assert "answered live by b" in run.out
        assert "    running tests, a" in run.out

    def test_timed_out_is_75_and_the_late_answer_lands(self, daemon: Daemon, mesh: Mesh) -> None:
        """A silent live responder: exit 75, status answer marked; its late answer arrives
        in the asker's inbox as kind ``answer``."""
        register(daemon, "a")
        b = live(mesh, "b")
        go = threading.Event()

        def slow(q: Query) -> str:
            go.wait(10)
            return "sorry, busy"

        b.on_query(slow)
        run = mc(daemon, "sessions", "ask", "b", "?", "--timeout", "0.5", "--json", session="a")
        go.set()
        late: list[dict[str, Any]] = []
        for _ in range(100):
            late = ok(mc(daemon, "inbox", "--json", session="a")).json()
            if late:
                break
        b.end()

        assert run.code == 75, run
        assert (run.json()["answered_by"], run.json()["timed_out"]) == ("status", True)
        assert "the wait ran out after 0.5 s; b did not answer" in run.err
        assert [(i["kind"], i["from"], i["text"]) for i in late] == [("answer", "b", "sorry, busy")]

    def test_follow_respond_then_reply(self, daemon: Daemon) -> None:
        """`inbox --follow --respond` prints the query; `reply QID` answers the waiting ask."""
        register(daemon, "a")
        register(daemon, "b")
        follower = Follower(daemon, "b", "--respond", "--json")
        try:
            follower.ready()
            asked: list[Run] = []
            t = threading.Thread(
                target=lambda: asked.append(
                    mc(
                        daemon,
                        "sessions",
                        "ask",
                        "b",
                        "ready?",
                        "--timeout",
                        "60",
                        "--json",
                        session="a",
                    )
                )
            )
            t.start()
            event = json.loads(follower.line())
            answered = ok(mc(daemon, "reply", str(event["id"]), "yes,", "ready", session="b"))
            t.join(90)
        finally:
            follower.stop()

        assert (event["kind"], event["from"], event["text"]) == ("query", "a", "ready?")
        assert answered.out == f"Answered query #{event['id']}.\n"
        assert asked[0].code == 0, asked[0]
        assert (asked[0].json()["answered_by"], asked[0].json()["answer"]) == (
            "session",
            "yes, ready",
        )


class TestFollow:
    def test_follow_json_prints_each_arrival_and_acks_it(self, daemon: Daemon) -> None:
        """--follow --json prints one JSON object a line as a message arrives, then acks it."""
        register(daemon, "a")
        register(daemon, "b")
        follower = Follower(daemon, "b", "--json")
        try:
            follower.ready()
            sent = ok(mc(daemon, "send", "b", "ping", "--json", session="a")).json()
            line = follower.line()
            states: dict[str, str] = {}
            for _ in range(100):
                states = daemon.call("message.status", {"session_id": "a", "ids": [sent["id"]]})[
                    "result"
                ]["states"]
                if states.get(str(sent["id"])) == "read":
                    break
        finally:
            follower.stop()

        event = json.loads(line)
        assert (event["id"], event["kind"], event["from"], event["text"]) == (
            sent["id"],
            "message",
            "a",
            "ping",
        )
        assert "not from the user" in event["framing"]
        assert states == {str(sent["id"]): "read"}

    def test_follow_json_prints_claim_notices_in_the_inbox_item_shape(self, daemon: Daemon) -> None:
        """SPEC §9: `inbox --follow --json` prints inbox items, one a line: a stolen claim
        is a `notice` (as `inbox --json` shows the same id), its event kind under `event`.
        Before: the raw event, kind `claim.stolen` and no `reply_to`."""
        register(daemon, "a")
        register(daemon, "b")
        ok(mc(daemon, "claim", "res:audit-db", session="b"))
        follower = Follower(daemon, "b", "--json", "--peek")
        try:
            follower.ready()
            ok(mc(daemon, "steal", "res:audit-db", "--reason", "mine", session="a"))
            line = json.loads(follower.line())
        finally:
            follower.stop()
        listed = ok(mc(daemon, "inbox", "--json", "--peek", session="b")).json()
        assert {"id", "kind", "from", "text", "created_at", "state", "reply_to"} <= set(line)
        assert (line["kind"], line["event"], line["reply_to"]) == ("notice", "claim.stolen", None)
        assert [(i["id"], i["kind"]) for i in listed] == [(line["id"], "notice")]
        assert "stolen by a" in line["text"]

    def test_follow_prints_the_backlog_framed_and_peek_keeps_it(self, daemon: Daemon) -> None:
        """What waited is printed first (human, framed); --peek leaves it unread."""
        register(daemon, "a")
        register(daemon, "b")
        ok(mc(daemon, "send", "b", "waiting", "for", "you", session="a"))
        follower = Follower(daemon, "b", "--peek")
        try:
            follower.ready()
            head = follower.line()
            body = follower.line()
        finally:
            follower.stop()
        still = ok(mc(daemon, "inbox", "--peek", "--json", session="b")).json()

        assert "[from a — another session of yours, not you] message" in head
        assert body == "    waiting for you\n"
        assert [i["text"] for i in still] == ["waiting for you"]

    def test_follower_stops_when_its_session_ends(self, daemon: Daemon) -> None:
        """Ending the session ends its follower, exit 0, saying why."""
        register(daemon, "b")
        follower = Follower(daemon, "b")
        try:
            follower.ready()
            ok(mc(daemon, "end", session="b"))
            code = follower.proc.wait(timeout=60)
            said = follower.line(follower.err)
        finally:
            follower.stop()

        assert code == 0
        assert "stopped following" in said

    def test_follower_prints_claim_notices(self, daemon: Daemon) -> None:
        """A claim stolen from the session shows up as the daemon's notice."""
        register(daemon, "a")
        register(daemon, "b")
        ok(mc(daemon, "claim", "port:9999", session="a"))
        follower = Follower(daemon, "a")
        try:
            follower.ready()
            ok(mc(daemon, "steal", "port:9999", "--reason", "deploy now", session="b"))
            line = follower.line()
        finally:
            follower.stop()

        assert line.startswith(
            "[from the mesh daemon — a notice about your sessions, not from you]"
        )
        assert "port:9999" in line
        assert "by b — deploy now" in line

    def test_respond_needs_follow(self, daemon: Daemon) -> None:
        """--respond alone is a usage error (a responder must stay connected)."""
        run = mc(daemon, "inbox", "--respond", session="b")

        assert run.code == 2


class TestBroadcast:
    def test_collect_live_and_silent(self, daemon: Daemon, mesh: Mesh) -> None:
        """--collect: b's live answer and c's status answer, each framed."""
        register(daemon, "a")
        register(daemon, "c", "idle work")
        b = live(mesh, "b")
        b.on_query(lambda q: "not me")
        doc = ok(
            mc(
                daemon,
                "broadcast",
                "who",
                "uses",
                "8080?",
                "--collect",
                "--timeout",
                "30",
                "--json",
                session="a",
            )
        ).json()
        human = ok(mc(daemon, "broadcast", "again?", "--collect", "--timeout", "30", session="a"))
        b.end()

        got = {x["from"]: (x["answered_by"], x["answer"]) for x in doc["answers"]}
        assert sorted(doc["recipients"]) == ["b", "c"]
        assert got["b"] == ("session", "not me")
        assert got["c"][0] == "status"
        assert "[from b — another session of yours, not you] answered live by b" in human.out
        assert "[from c — another session of yours, not you] answered by the status" in human.out

    def test_waits_that_run_out_say_so(self, daemon: Daemon) -> None:
        """A responder that does not answer in time: broadcast --collect and handoff
        request say on stderr that the wait ran out, and for whom."""
        register(daemon, "a")
        register(daemon, "b")
        follower = Follower(daemon, "b", "--respond", "--json")
        try:
            follower.ready()
            told = mc(daemon, "broadcast", "who?", "--collect", "--timeout", "0.5", session="a")
            asked = mc(daemon, "handoff", "request", "b", "--timeout", "0.5", session="a")
        finally:
            follower.stop()

        assert told.code == 0, told
        assert "the wait ran out after 0.5 s; no live answer from b" in told.err
        assert asked.code == 75, asked
        assert "the wait ran out after 0.5 s; b did not answer" in asked.err
        assert "s left" not in told.err + asked.err

    def test_plain_broadcast_to_a_path(self, daemon: Daemon, short_tmp: Any) -> None:
        """--path reaches only the sessions working there; it lands in their inbox."""
        register(daemon, "a")
        register(daemon, "b")
        ok(mc(daemon, "claim", str(short_tmp / "proj"), session="b"))
        register(daemon, "c")
        run = ok(
            mc(
                daemon,
                "broadcast",
                "touching",
                "proj",
                "--path",
                str(short_tmp / "proj" / "x"),
                session="a",
            )
        )
        b_items = ok(mc(daemon, "inbox", "--json", session="b")).json()
        c_items = ok(mc(daemon, "inbox", "--json", session="c")).json()

        assert run.out == "Sent to 1 session: b.\n"
        assert [(i["kind"], i["text"]) for i in b_items] == [("broadcast", "touching proj")]
        assert c_items == []


class TestHandoff:
    def test_write_list_show_and_end(self, daemon: Daemon) -> None:
        """write (variadic files/next), list for the addressee, show, and end --handoff."""
        register(daemon, "a")
        register(daemon, "b")
        register(daemon, "c")
        args = ("auth half done", "--to", "b", "--files", "a.py", "b.py", "--next", "test", "ship")
        written = ok(mc(daemon, "handoff", "write", *args, "--json", session="a")).json()
        ok(mc(daemon, "end", "--handoff", "c is done: see PR 12", session="c"))
        listed = ok(mc(daemon, "handoff", "list", "--json", session="b")).json()
        human = ok(mc(daemon, "handoff", "list", session="b"))
        shown = ok(mc(daemon, "handoff", "show", str(written["id"])))
        every = ok(mc(daemon, "handoff", "list", "--all", "--json")).json()

        assert (written["from"], written["to"], written["files"], written["next_steps"]) == (
            "a",
            "b",
            ["a.py", "b.py"],
            ["test", "ship"],
        )
        assert [h["summary"] for h in listed] == ["auth half done", "c is done: see PR 12"]
        assert f"#{written['id']} [from a — another session of yours, not you] for b" in human.out
        assert "for whoever comes next" in human.out
        assert shown.out.splitlines()[0].startswith(
            f"Handoff #{written['id']} [from a — another session of yours, not you] for b"
        )
        assert "  files: a.py, b.py" in shown.out
        assert "    - ship" in shown.out
        assert len(every) == 2

    def test_request_from_a_live_responder(self, daemon: Daemon, mesh: Mesh) -> None:
        """handoff request asks b's responder and saves its answer addressed to a."""
        register(daemon, "a")
        b = live(mesh, "b")
        b.on_query(lambda q: "auth done; tests next" if q.request == "handoff" else "?")
        run = ok(mc(daemon, "handoff", "request", "b", "--timeout", "30", session="a"))
        listed = ok(mc(daemon, "handoff", "list", "--json", session="a")).json()
        b.end()

        assert "[from b — another session of yours, not you] for a" in run.out
        assert "    auth done; tests next" in run.out
        assert "(written by b; saved for you)" in run.out
        assert [(h["from"], h["to"], h["summary"]) for h in listed] == [
            ("b", "a", "auth done; tests next")
        ]


class TestSync:
    def test_sync_shows_sessions_claims_inbox_and_handoffs(self, daemon: Daemon) -> None:
        """One screen: who is live and what they hold, my unread items (left unread),
        handoffs for me."""
        register(daemon, "a", "refactor auth")
        register(daemon, "b", "docs")
        ok(mc(daemon, "claim", "port:8080", "--reason", "dev server", session="a"))
        ok(mc(daemon, "send", "b", "I hold 8080", session="a"))
        ok(mc(daemon, "handoff", "write", "notes for b", "--to", "b", session="a"))
        human = ok(mc(daemon, "sync", session="b"))
        doc = ok(mc(daemon, "sync", "--json", session="b")).json()
        still = ok(mc(daemon, "inbox", "--json", session="b")).json()

        assert human.out.startswith("Sync for b (profile test):")
        assert "- a (shell) — refactor auth" in human.out  # the id does not say its source
        assert "    holds port:8080 (exclusive" in human.out
        assert "— dev server" in human.out
        assert "(you)" in human.out
        assert "[from a — another session of yours, not you] message" in human.out
        assert "    I hold 8080" in human.out
        assert "notes for b" in human.out
        assert {s["session_id"] for s in doc["sessions"]} == {"a", "b"}
        assert [(i["kind"], i["state"]) for i in doc["inbox"]] == [
            ("message", "delivered"),
            ("handoff", "delivered"),
        ]
        assert [h["summary"] for h in doc["handoffs"]] == ["notes for b"]
        assert [i["kind"] for i in still] == ["message", "handoff"]
