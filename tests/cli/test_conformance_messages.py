"""Conformance of SPEC §6 (messages, queries, handoffs) through the real command line,
daemon and socket; each test a defect found that way (docs/CONFORMANCE.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.support import Client, wait_for

from .conftest import Meshctl
from .test_conformance_audit import (  # first audit's
    Daemon,
    MeshEnv,
    as_,
    ok,
    register,
)
from .test_messages import Follower


@pytest.mark.parametrize(
    "argv",
    [
        ("send", "cli:gone", "hello"),
        ("sessions", "ask", "cli:gone", "what now?"),
        ("handoff", "request", "cli:gone"),
        ("handoff", "write", "done", "--to", "cli:gone"),
        ("sessions", "show", "cli:gone"),
    ],
)
def test_an_addressee_that_ended_is_not_the_caller_s_own_expiry(
    meshctl: Meshctl, daemon: Daemon, argv: tuple[str, ...]
) -> None:
    """Sending to, asking or requesting a handoff of a session that has ended said
    "session cli:gone ended; register again" and told the caller to get a new session
    (`export MESH_SESSION=$(meshctl register …)`), while the caller's own session was
    fine (so did `sessions show` of it). The error (SESSION_EXPIRED, exit 1) now says
    that session ended, with ``data.caller`` false, and points at the live sessions."""
    register(meshctl, daemon, "cli:me")
    register(meshctl, daemon, "cli:gone")
    ok(meshctl("end", env=as_(daemon, "cli:gone")))

    human = meshctl(*argv, env=as_(daemon, "cli:me"))
    assert human.code == 1, human
    assert "cli:gone" in human.err, human
    assert "register again" not in human.err, human
    assert "MESH_SESSION" not in human.err, human
    assert "sessions active" in human.err, human

    doc = meshctl(*argv, "--json", env=as_(daemon, "cli:me"))
    assert doc.code == 1, doc
    error = json.loads(doc.out)["error"]
    assert error["data"]["code"] == "SESSION_EXPIRED", error
    assert error["data"]["session_id"] == "cli:gone", error
    assert error["data"]["caller"] is False, error

    for own in (("send", "cli:me", "x"), ("whoami",)):  # its own session: register again
        still = meshctl(*own, env=as_(daemon, "cli:gone"))
        assert "register again" in still.err, still
        assert "MESH_SESSION" in still.err, still


def unread_for_to(
    meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv, count: int, *, budget: int
) -> None:
    """cli:from and cli:to registered, and ``count`` messages waiting in cli:to's inbox
    (the send budget raised to ``budget`` a minute first, so none is refused)."""
    mesh_env.write_config(f"[defaults]\nmessage_budget_per_minute = {budget}\n")
    ok(meshctl("daemon", "reload", env=daemon.env))
    register(meshctl, daemon, "cli:from")
    register(meshctl, daemon, "cli:to")
    fill_inbox(daemon, count)


def fill_inbox(daemon: Daemon, count: int) -> None:
    """``count`` messages from cli:from to cli:to over one connection."""
    with Client(daemon.socket, timeout=30) as c:
        for n in range(1, count + 1):
            params = {"session_id": "cli:from", "to": "cli:to", "text": f"message {n}"}
            reply = c.call("message.send", params)
            assert "result" in reply, reply


class TestInboxPrintsEveryUnreadItem:
    """SPEC §6/§9: ``meshctl inbox`` prints unread items. It asked the daemon for one page
    (100) and said nothing of the rest: with 150 waiting it printed the oldest 100, exit
    0, and the person took the inbox as read."""

    def test_more_than_a_page_is_printed_whole(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        unread_for_to(meshctl, daemon, mesh_env, 150, budget=1000)

        peeked = ok(meshctl("inbox", "--peek", "--json", env=as_(daemon, "cli:to"))).json()
        assert [i["text"] for i in peeked] == [f"message {n}" for n in range(1, 151)]

        human = ok(meshctl("inbox", env=as_(daemon, "cli:to")))
        assert "message 1\n" in human.out, human
        assert "message 150\n" in human.out, human
        assert "unread" not in human.err, human
        left = ok(meshctl("inbox", "--json", env=as_(daemon, "cli:to"))).json()
        assert left == [], left

    def test_past_the_largest_page_a_note_says_how_many_more_wait(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        unread_for_to(meshctl, daemon, mesh_env, 1003, budget=2000)

        first = ok(meshctl("inbox", "--json", env=as_(daemon, "cli:to")))
        assert len(first.json()) == 1000, first.err
        assert "3 more unread item(s) wait" in first.err, first
        rest = ok(meshctl("inbox", "--json", env=as_(daemon, "cli:to")))
        assert [i["text"] for i in rest.json()] == [f"message {n}" for n in (1001, 1002, 1003)]
        assert "more unread" not in rest.err, rest

    def test_all_reads_every_page_of_the_history(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        """``inbox --all`` (read items too) showed one page of the history."""
        unread_for_to(meshctl, daemon, mesh_env, 1003, budget=2000)

        every = ok(meshctl("inbox", "--all", "--peek", "--json", env=as_(daemon, "cli:to")))
        assert [i["text"] for i in every.json()] == [f"message {n}" for n in range(1, 1004)]

    def test_a_follower_prints_the_whole_backlog_first(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        """``inbox --follow`` printed the first 100 of the backlog, then only what
        arrived after: the rest was never shown while it ran."""
        unread_for_to(meshctl, daemon, mesh_env, 150, budget=1000)

        follower = Follower(daemon, "cli:to", "--json")
        try:
            follower.ready()
            texts = [json.loads(follower.line())["text"] for _ in range(150)]
        finally:
            follower.stop()
        assert texts == [f"message {n}" for n in range(1, 151)]


def test_a_reply_to_a_daemon_notice_says_notices_take_none(
    meshctl: Meshctl, daemon: Daemon
) -> None:
    """``meshctl reply ID`` to a notice in the inbox (a claim that expired) answered "no
    session meshd in profile test" with the hint to register a session: the reply was
    addressed to the daemon's sender name as if it were a session. It is refused as a
    notice (MESSAGE_REFUSED, ``data.reason: "notice"``, exit 1), nothing sent."""
    register(meshctl, daemon, "cli:n")
    ok(meshctl("claim", "res:n", "--ttl", "0.1", env=as_(daemon, "cli:n")))

    def notice() -> Any:
        items = ok(meshctl("inbox", "--peek", "--json", env=as_(daemon, "cli:n"))).json()
        return next((i for i in items if i["kind"] == "notice"), None)

    found = wait_for(notice, what="the expiry notice in the inbox")

    human = meshctl("reply", str(found["id"]), "thanks", env=as_(daemon, "cli:n"))
    assert human.code == 1, human
    assert "notice from the mesh daemon" in human.err, human
    assert "no session meshd" not in human.err, human
    doc = meshctl("reply", str(found["id"]), "thanks", "--json", env=as_(daemon, "cli:n"))
    error = json.loads(doc.out)["error"]
    assert error["data"]["code"] == "MESSAGE_REFUSED", error
    assert error["data"]["reason"] == "notice", error


def test_a_reply_to_a_message_may_be_as_long_as_a_message(meshctl: Meshctl, daemon: Daemon) -> None:
    """``meshctl reply ID TEXT`` tries ID as an open query first (an answer: at most
    2 KiB), then as a message (a reply: ``max_body_bytes``, 8 KiB). The daemon measured
    the text against the answer's limit before it looked the query up, so a 3,000-byte
    reply to a message was refused "text is 3000 bytes; the limit is 2048"."""
    register(meshctl, daemon, "cli:a")
    register(meshctl, daemon, "cli:b")
    sent = ok(meshctl("send", "cli:b", "please reply", "--json", env=as_(daemon, "cli:a")))
    long = "r" * 3000

    replied = meshctl("reply", str(sent.json()["id"]), long, "--json", env=as_(daemon, "cli:b"))

    assert replied.code == 0, replied
    assert replied.json()["kind"] == "message", replied
    got = ok(meshctl("inbox", "--json", env=as_(daemon, "cli:a"))).json()
    assert [i["text"] for i in got] == [long]


def test_broadcast_timeout_without_collect_is_a_usage_error(
    meshctl: Meshctl, daemon: Daemon
) -> None:
    """``broadcast TEXT --timeout 30`` without ``--collect`` sent at once and ignored the
    timeout (only a collected broadcast waits): a person who meant to wait for answers
    got none and no word why. It is a usage error (exit 2), nothing sent, as
    ``inbox --respond`` without ``--follow`` is."""
    register(meshctl, daemon, "cli:a")
    register(meshctl, daemon, "cli:b")

    run = meshctl("broadcast", "who uses 8080?", "--timeout", "30", env=as_(daemon, "cli:a"))

    assert run.code == 2, run
    assert "--timeout needs --collect" in run.err, run
    assert ok(meshctl("inbox", "--json", env=as_(daemon, "cli:b"))).json() == []
    sent = ok(meshctl("broadcast", "hello", env=as_(daemon, "cli:a")))
    assert "Sent to 1 session" in sent.out, sent


class TestHandoffListShowsEveryOne:
    """SPEC §6: "`handoff list` shows those addressed to me, written by me, and
    unaddressed ones; `--all` every one". Both showed the newest 50 (the wire's default
    page) and said nothing of the rest. ``handoff.list`` takes ``before`` (an id) to page
    back, and meshctl reads every page."""

    def write(self, daemon: Daemon, count: int) -> None:
        with Client(daemon.socket, timeout=30) as c:
            for n in range(1, count + 1):
                reply = c.call("handoff.write", {"session_id": "cli:w", "summary": f"h{n}"})
                assert "result" in reply, reply

    def test_every_page_is_listed(self, meshctl: Meshctl, daemon: Daemon) -> None:
        register(meshctl, daemon, "cli:w")
        self.write(daemon, 60)

        mine = ok(meshctl("handoff", "list", "--json", env=as_(daemon, "cli:w"))).json()
        every = ok(meshctl("handoff", "list", "--all", "--json", env=daemon.env)).json()
        human = ok(meshctl("handoff", "list", "--all", env=daemon.env))

        expected = [f"h{n}" for n in range(1, 61)]
        assert [h["summary"] for h in mine] == expected
        assert [h["summary"] for h in every] == expected
        assert ": h1\n" in human.out, human

    def test_the_wire_pages_back_with_before(self, daemon: Daemon, meshctl: Meshctl) -> None:
        register(meshctl, daemon, "cli:w")
        self.write(daemon, 5)
        with Client(daemon.socket, timeout=10) as c:
            first = c.call("handoff.list", {"all": True, "limit": 2})["result"]["handoffs"]
            params = {"all": True, "limit": 2, "before": first[-1]["id"]}
            second = c.call("handoff.list", params)["result"]["handoffs"]
        assert [h["summary"] for h in first] == ["h5", "h4"]
        assert [h["summary"] for h in second] == ["h3", "h2"]
