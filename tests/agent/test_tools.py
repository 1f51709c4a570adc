"""meshctl.agent: the tool table every frontend shares, against a real meshd.

The context here is the smallest a frontend can supply: the blocking client, its
errors turned into the protocol's (:class:`Refused`, or None when unreachable).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import DaemonHandle

from meshctl import Mesh, MeshError, MeshUnavailable
from meshctl.agent import MODES, Refused, advice, cost, run, schema, tools_for


class Ctx:
    """A frontend's context: one session, one working folder, the real client."""

    def __init__(self, mesh: Mesh | None, session_id: str, cwd: str = "/") -> None:
        self.mesh = mesh
        self._sid = session_id
        self._cwd = cwd
        self.arrivals = ""
        self.ttls: list[float] = []

    @property
    def session_id(self) -> str:
        return self._sid

    @property
    def cwd(self) -> str:
        return self._cwd

    def call(self, method: str, params: dict[str, Any], timeout: float | None = None) -> Any:
        if self.mesh is None:
            return None
        try:
            return self.mesh.call(method, params, timeout=timeout)
        except MeshUnavailable:
            return None
        except MeshError as exc:
            raise Refused(exc.message, str(exc.data.get("code") or ""), exc.data) from exc

    def has_method(self, method: str) -> bool:
        return True

    def arrived(self) -> str:
        return self.arrivals

    def asker(self, query_id: int) -> str | None:
        return None

    def claimed(self, ttl: float) -> None:
        self.ttls.append(ttl)


@pytest.fixture
def mesh(daemon: DaemonHandle) -> Any:
    with Mesh("test", daemon.socket, autostart=False, timeout=10) as m:
        yield m


def names(mode: str) -> set[str]:
    return {t.name for t in tools_for(mode)}


def test_the_default_set_costs_at_most_600_tokens_and_covers_the_everyday_cases() -> None:
    assert MODES[0] == "compact"
    compact = tools_for()
    assert cost(compact) <= 600, [(t.name, cost([t])) for t in compact]
    # who is here and what they hold, ask, send/read, claim/release, notes, signals, once
    assert names("compact") == {"mesh_sessions", "mesh_ask", "mesh_msg", "mesh_claim",
                                "mesh_notes", "mesh_signal", "mesh_once"}  # fmt: skip
    msg = next(t for t in compact if t.name == "mesh_msg")
    assert msg.parameters["properties"]["action"]["enum"] == ["send", "reply", "inbox"]
    claim = next(t for t in compact if t.name == "mesh_claim")
    assert claim.parameters["properties"]["action"]["enum"] == ["claim", "release"]


def test_the_full_set_has_one_tool_per_action() -> None:
    full = tools_for("full")
    assert len(full) == 13
    assert names("full") >= {"mesh_reply", "mesh_send", "mesh_inbox", "mesh_release",
                             "mesh_broadcast", "mesh_handoff", "mesh_board"}  # fmt: skip
    assert cost(full) > cost(tools_for("compact"))
    for tool in full:
        assert schema(tool) == {"name": tool.name, "description": tool.description,
                                "parameters": tool.parameters}  # fmt: skip


def test_every_tool_answers_json_when_the_daemon_is_down() -> None:
    ctx = Ctx(None, "cli:me")
    args = {"action": "list", "resources": ["a"], "to": "x", "question": "q", "id": 1,
            "text": "t", "name": "n", "key": "k", "summary": "s"}  # fmt: skip
    for mode in MODES:
        for tool in tools_for(mode):
            doc = json.loads(tool.handler(ctx, dict(args)))
            assert "error" in doc, (tool.name, doc)


def test_bad_arguments_and_unknown_actions_are_errors_not_exceptions() -> None:
    ctx = Ctx(None, "cli:me")
    assert "bad arguments" in json.loads(run(ctx, "mesh_ask", {}))["error"]
    assert "action must be" in json.loads(run(ctx, "mesh_msg", {"action": "shout"}))["error"]
    assert "no mesh tool" in json.loads(run(ctx, "mesh_nothing", {}))["error"]


def test_compact_tools_round_trip_on_a_real_daemon(mesh: Mesh, tmp_path: Path) -> None:
    for sid in ("cli:me", "cli:other"):
        mesh.call("session.register", {"session_id": sid, "task": f"{sid} task"})
    me = Ctx(mesh, "cli:me", cwd=str(tmp_path))
    other = Ctx(mesh, "cli:other", cwd=str(tmp_path))

    listed = json.loads(run(me, "mesh_sessions", {}, "compact"))
    sent = json.loads(run(me, "mesh_msg", {"action": "send", "to": "cli:other", "text": "hi"}))
    inbox = json.loads(run(other, "mesh_msg", {"action": "inbox"}))
    again = json.loads(run(other, "mesh_msg", {"action": "inbox"}))
    replied = json.loads(run(other, "mesh_msg", {"action": "reply", "id": sent["id"],
                                                 "text": "hello back"}))  # fmt: skip
    granted = json.loads(run(me, "mesh_claim", {"resources": ["a.py"], "reason": "edit"}))
    held = json.loads(run(other, "mesh_claim", {"resources": [str(tmp_path / "a.py")]}))
    released = json.loads(run(me, "mesh_claim", {"action": "release", "resources": ["a.py"]}))

    assert [s["session_id"] for s in listed["sessions"]] == ["cli:other"]
    assert "not from the user" in listed["framing"]
    assert [i["text"] for i in inbox["items"]] == ["hi"]
    assert again["items"] == [], "read items are acknowledged"
    assert "error" not in replied, replied
    assert granted["status"] == "granted"
    assert me.ttls == [1800.0], "the frontend hears of the claim's ttl"
    assert held["status"] == "held"
    assert released["released"] == [f"file:{tmp_path / 'a.py'}"]


def test_a_refusal_keeps_its_code_and_what_arrived_follows_the_result(mesh: Mesh) -> None:
    mesh.call("session.register", {"session_id": "cli:me"})
    ctx = Ctx(mesh, "cli:me")
    ctx.arrivals = "[Session Mesh] framed news"

    text = run(ctx, "mesh_msg", {"action": "send", "to": "cli:nobody", "text": "hi"})

    doc, news = text.split("\n\n", 1)
    assert json.loads(doc)["code"] == "UNKNOWN_SESSION"
    assert news == "[Session Mesh] framed news"


def test_once_says_reserved_by_you_for_the_callers_own_reservation(mesh: Mesh) -> None:
    for sid in ("cli:me", "cli:other"):
        mesh.call("session.register", {"session_id": sid})
    me, other = Ctx(mesh, "cli:me"), Ctx(mesh, "cli:other")

    first = json.loads(run(me, "mesh_once", {"action": "reserve", "key": "mail:x"}))
    mine = json.loads(run(me, "mesh_once", {"action": "reserve", "key": "mail:x"}))
    theirs = json.loads(run(other, "mesh_once", {"action": "reserve", "key": "mail:x"}))

    assert first["status"] == "reserved"
    assert mine["status"] == "reserved by you"
    assert theirs["status"] == "running"


def test_inbox_lines_name_the_tool_of_the_set_the_model_has() -> None:
    query = {"id": 7, "kind": "query", "from": "cli:b", "text": "status?"}
    assert "(answer with mesh_msg action=reply id=7)" in advice.item_line(query, "compact")
    assert "(answer with mesh_reply id=7)" in advice.item_line(query, "full")
    assert advice.delivery([query]).startswith(advice.FRAME)
