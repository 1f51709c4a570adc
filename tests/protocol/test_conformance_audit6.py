"""Sixth conformance audit, on the wire: SPEC §4 "Over-long fields are refused with
TOO_LARGE", for every field a schema bounds, not only those the daemon measures itself
(docs/CONFORMANCE.md)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.support import Client


@pytest.mark.parametrize(
    ("method", "params", "path", "limit"),
    [
        ("session.register", {"session_id": "s" * 129, "task": "t"}, "$.session_id", 128),
        ("session.register", {"session_id": "cli:x", "parent": "p" * 129}, "$.parent", 128),
        ("session.register", {"task": "t", "pid": 1, "source": "s" * 65}, "$.source", 64),
        ("claim.acquire", {"session_id": "cli:x", "resources": ["res:a"], "reason": "r" * 201},
         "$.reason", 200),
        ("message.send", {"session_id": "s" * 129, "to": "cli:y", "text": "hi"},
         "$.session_id", 128),
    ],
)  # fmt: skip
def test_an_over_long_field_is_too_large(
    daemon: Any, method: str, params: dict[str, Any], path: str, limit: int
) -> None:
    """Before: INVALID_PARAMS ("Expected `str` of length <= 128"), so a register with a
    long id failed otherwise than one with a long task."""
    with Client(daemon.socket, timeout=10) as c:
        reply = c.call(method, params)

    assert reply["error"]["code"] == -32009, reply
    assert reply["error"]["data"] == {"code": "TOO_LARGE", "path": path, "limit": limit}
    assert str(limit) in reply["error"]["message"], reply


@pytest.mark.parametrize("source", ["", "a b", "cli\n"])
def test_a_source_of_the_wrong_form_is_invalid_params(daemon: Any, source: str) -> None:
    """A source's form is -32602, whatever its length; a trailing newline is not let
    through by the pattern's ``$`` (before, ``"cli\\n"`` was registered)."""
    with Client(daemon.socket, timeout=10) as c:
        reply = c.call("session.register", {"task": "t", "pid": 1, "source": source})

    assert reply["error"]["code"] == -32602, reply
    assert reply["error"]["data"]["path"] == "$.source", reply
