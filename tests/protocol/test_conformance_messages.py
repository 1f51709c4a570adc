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
