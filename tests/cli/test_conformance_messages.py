"""Conformance of SPEC §6 (messages, queries, handoffs) through the real command line,
daemon and socket; each test a defect found that way (docs/CONFORMANCE.md)."""

from __future__ import annotations

import json

import pytest

from .conftest import Meshctl
from .test_conformance_audit import Daemon, as_, ok, register  # first audit's


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

    still = meshctl("send", "cli:gone", "x", env=as_(daemon, "cli:gone"))
    assert "register again" in still.err, still  # its own session: register again
