"""Conformance of SPEC §6 (messages, queries, handoffs) on the wire: statements a raw
client of a real daemon hit, each a defect found by speaking the wire as a user would
(docs/CONFORMANCE.md)."""

from __future__ import annotations

from typing import Any

from tests.support import Client


def register(c: Client, sid: str) -> None:
    reply = c.call("session.register", {"session_id": sid, "task": sid, "liveness": "heartbeat"})
    assert "result" in reply, reply


class TestSendWithoutAddressee:
    """SPEC §3: -32602 invalid params, with the JSON path of the field in data.path. A
    ``message.send`` that names neither ``to`` nor ``reply_to`` lacks a param; it was
    answered NOT_FOUND (-32014), as if something had been looked for and not found."""

    def test_no_to_and_no_reply_to_is_invalid_params(self, daemon: Any) -> None:
        with Client(daemon.socket, timeout=10) as c:
            register(c, "cli:a")
            for params in ({}, {"to": None}):
                reply = c.call("message.send", {"session_id": "cli:a", "text": "hi", **params})
                err = reply["error"]
                assert err["code"] == -32602, reply
                assert err["data"] == {"code": "INVALID_PARAMS", "path": "$.to"}, reply

    def test_an_unknown_reply_to_is_still_not_found(self, daemon: Any) -> None:
        with Client(daemon.socket, timeout=10) as c:
            register(c, "cli:a")
            reply = c.call("message.send", {"session_id": "cli:a", "text": "hi", "reply_to": 9})
        assert reply["error"]["data"]["code"] == "NOT_FOUND", reply


class TestStatusWrittenHandoffs:
    """SPEC §6: the status responder answers "from what the session reported (…, its
    last handoff that was not addressed to someone else)", and ``handoff request``
    stores the answer as a handoff addressed to the requester. A request the status
    responder answered stored the daemon's own sentence as the session's handoff, and
    the next status answer quoted it as the session's last handoff: every further
    request nested the one before ("Last handoff (#7): cli:w is idle … Last handoff
    (#6): cli:w is idle … Last handoff (#2): the real one"). The status responder
    quotes only what the session wrote, before and after a restart; a stored handoff
    the status responder wrote says so (``by_status``)."""

    @staticmethod
    def status_answer(c: Client) -> str:
        reply = c.call("query.ask", {"session_id": "cli:r", "to": "cli:w", "question": "?"})
        assert reply["result"]["answered_by"] == "status", reply
        answer: str = reply["result"]["answer"]
        return answer

    def test_a_requested_handoff_the_status_responder_wrote_is_not_quoted(
        self, daemon: Any
    ) -> None:
        with Client(daemon.socket, timeout=10) as c:
            register(c, "cli:w")
            register(c, "cli:r")
            wrote = c.call(
                "handoff.write", {"session_id": "cli:w", "to": "cli:r", "summary": "auth half done"}
            )
            real = wrote["result"]["id"]
            for _ in range(2):
                got = c.call("handoff.request", {"session_id": "cli:r", "to": "cli:w"})
                assert got["result"]["answered_by"] == "status", got
                assert got["result"]["handoff"]["to"] == "cli:r", got  # still stored
                assert got["result"]["handoff"]["by_status"] is True, got
                summary = got["result"]["handoff"]["summary"]
                assert summary.count("Last handoff") == 1, summary
                assert f"Last handoff (#{real}): auth half done" in summary, summary
            answer = self.status_answer(c)
        assert answer.count("Last handoff") == 1, answer
        assert f"Last handoff (#{real}): auth half done" in answer, answer

        daemon.restart()
        with Client(daemon.socket, timeout=10) as c:
            answer = self.status_answer(c)
            listed = c.call("handoff.list", {"session_id": "cli:r"})["result"]["handoffs"]
        assert f"Last handoff (#{real}): auth half done" in answer, answer
        # the requested ones are kept, addressed to cli:r, and say who wrote them
        assert [h["by_status"] for h in listed] == [True, True, False], listed


class TestTheDaemonsOwnName:
    """SPEC §6 (Safety): what a session sends is framed "as coming from another session
    of the same user". The daemon's own notices come from ``meshd``; a session could
    register under that id, and whatever it sent was framed as a notice of the mesh
    daemon ("a notice about your sessions, not from you"), the words reserved for what
    the daemon itself says. The id is the daemon's: registering it is -32602."""

    def test_registering_the_daemon_s_sender_id_is_refused(self, daemon: Any) -> None:
        with Client(daemon.socket, timeout=10) as c:
            reply = c.call(
                "session.register", {"session_id": "meshd", "task": "t", "liveness": "heartbeat"}
            )
            assert reply["error"]["code"] == -32602, reply
            assert reply["error"]["data"]["path"] == "$.session_id", reply
            assert "meshd" in reply["error"]["message"], reply
            listed = c.call("session.list", {})["result"]["sessions"]
        assert listed == [], listed


class TestHandoffToASessionThatTakesNoMessages:
    """SPEC §6: ``accept_messages = false`` → MESSAGE_REFUSED, and multi-party gateway
    chats default to it, so no other session's words land in a group chat. A handoff
    addressed to such a session was stored and dropped into its inbox all the same
    (kind ``handoff``), where its frontend shows unread items to the model. It is
    refused as a message to it is; unaddressed handoffs are unchanged."""

    def test_it_is_refused_and_nothing_lands_in_its_inbox(self, daemon: Any) -> None:
        with Client(daemon.socket, timeout=10) as c:
            register(c, "cli:w")
            reply = c.call(
                "session.register",
                {"session_id": "gw:group", "task": "t", "liveness": "heartbeat",
                 "accept_messages": False},
            )  # fmt: skip
            assert "result" in reply, reply
            refused = c.call(
                "handoff.write", {"session_id": "cli:w", "to": "gw:group", "summary": "hi"}
            )
            inbox = c.call("message.inbox", {"session_id": "gw:group", "peek": True})
            listed = c.call("handoff.list", {"session_id": "gw:group", "all": True})
            unaddressed = c.call("handoff.write", {"session_id": "cli:w", "summary": "hi"})
        assert refused["error"]["code"] == -32006, refused
        assert refused["error"]["data"]["code"] == "MESSAGE_REFUSED", refused
        assert inbox["result"]["items"] == [], inbox
        assert listed["result"]["handoffs"] == [], listed
        assert "result" in unaddressed, unaddressed
