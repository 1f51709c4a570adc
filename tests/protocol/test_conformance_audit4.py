"""Fourth conformance audit, SPEC §3 (wire protocol): statements a raw client of a real
daemon hit, each a defect found by speaking the wire as a user would (docs/CONFORMANCE.md).
"""

from __future__ import annotations

from typing import Any

from tests.support import Client


def error_of(daemon: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    with Client(daemon.socket, timeout=10) as c:
        reply = c.call(method, params)
    assert "error" in reply, reply
    err: dict[str, Any] = reply["error"]
    return err


class TestInvalidParamsPath:
    """-32602 carries "the JSON path of the field in data.path": for a missing or an
    unknown field that is the field's own path, not the object holding it."""

    def test_a_missing_field_is_named_by_its_path(self, daemon: Any) -> None:
        err = error_of(daemon, "signal.emit", {"session_id": "cli:x"})
        assert err["code"] == -32602, err
        assert err["data"]["path"] == "$.name", err

    def test_an_unknown_field_is_named_by_its_path(self, daemon: Any) -> None:
        err = error_of(daemon, "mesh.ping", {"bogus": 1})
        assert err["code"] == -32602, err
        assert err["data"] == {"code": "INVALID_PARAMS", "path": "$.bogus"}

    def test_a_nested_unknown_field_keeps_its_whole_path(self, daemon: Any) -> None:
        err = error_of(daemon, "mesh.ping", {"bogus": {"x": 1}})
        assert err["data"]["path"] == "$.bogus"


class TestNoSessionOnTheWire:
    """NO_SESSION: "a command that acts for a session was given none". At the wire a
    method that acts for a session and gets no ``session_id`` (absent, null or empty)
    answers NO_SESSION (-32004), not a generic -32602; data.path still names it."""

    def test_a_missing_session_id_is_no_session(self, daemon: Any) -> None:
        err = error_of(daemon, "claim.acquire", {"resources": ["res:x"]})
        assert err["code"] == -32004, err
        assert err["data"]["code"] == "NO_SESSION"
        assert err["data"]["path"] == "$.session_id"

    def test_a_null_or_empty_session_id_is_no_session(self, daemon: Any) -> None:
        for sid in (None, ""):
            err = error_of(daemon, "message.send", {"session_id": sid, "to": "x", "text": "y"})
            assert err["data"]["code"] == "NO_SESSION", (sid, err)

    def test_a_malformed_session_id_stays_invalid_params(self, daemon: Any) -> None:
        err = error_of(daemon, "claim.acquire", {"session_id": 5, "resources": ["res:x"]})
        assert err["code"] == -32602, err
        assert err["data"]["path"] == "$.session_id"
