"""What a hook asks the daemon before Hermes runs the tool, and what it leaves to the
plugin's one sending thread.

Hermes waits for every hook on every tool call, so on the hook's path stays only what
the hook answers with: the claim check a write's warning needs. The inbox a tool
result carries is pushed to the plugin (``tests/hermes/test_view.py``); the status,
the files read and written go by the sender, and are on the daemon once
:meth:`Runtime.flush` returns. In this process (the plugin is standard library only),
against the test's real daemon.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from tests.conftest import DaemonHandle
from tests.support import wait_for

from meshctl.hermes._hooks import hooks
from meshctl.hermes._runtime import Runtime

S = "20261202_040000_aaaaaa"


@pytest.fixture
def rt(daemon: DaemonHandle) -> Iterator[Runtime]:
    runtime = Runtime("default")
    yield runtime
    runtime.end(S)
    runtime.close()


def tool_call(rt: Runtime, tool: str, args: dict[str, Any]) -> int:
    """Fire one tool call's hooks as Hermes does; the requests they made on their path."""
    table = hooks(rt)
    call = dict(tool_name=tool, args=args, session_id=S, task_id="t", tool_call_id="c",
                turn_id="u")  # fmt: skip
    before = rt.link.calls
    table["pre_tool_call"](**call)
    table["transform_tool_result"](result='{"ok": true}', **call)
    table["post_tool_call"](result='{"ok": true}', status="ok", duration_ms=1, **call)
    return rt.link.calls - before


def started(rt: Runtime) -> None:
    """The session starts and its pushed inbox view is in sync (a moment later)."""
    hooks(rt)["on_session_start"](session_id=S, platform="cli", model="m")
    wait_for(lambda: rt.view.in_sync(rt.sessions[S]), timeout=30, what="the view in sync")


def test_a_read_asks_nothing_and_the_rest_is_sent_by_the_sender(
    rt: Runtime, daemon: DaemonHandle, tmp_path: Any
) -> None:
    started(rt)
    path = tmp_path / "notes.txt"
    path.write_text("x")

    on_path = tool_call(rt, "read_file", {"path": str(path)})
    rt.flush()

    assert on_path == 0, "the inbox is pushed; the status and the read are the sender's"
    me = daemon.call("session.get", {"session_id": S})["result"]
    assert (me["status"], me["tools"]) == ("tool-running", ["read_file"])
    shown = daemon.call("board.show", {"project_or_path": str(tmp_path)})["result"]
    assert [m["path"] for m in shown["watching"] if m["session_id"] == S] == [str(path)]


def test_a_write_asks_for_its_claim_check_only(
    rt: Runtime, daemon: DaemonHandle, tmp_path: Any
) -> None:
    started(rt)
    path = tmp_path / "auth.py"

    on_path = tool_call(rt, "write_file", {"path": str(path), "content": "x"})
    rt.flush()

    assert on_path == 1, "the claim check; the inbox is pushed, status and board are sent"
    me = daemon.call("session.get", {"session_id": S})["result"]
    assert (me["status"], me["tools"]) == ("tool-running", ["write_file"])
    changes = daemon.call("board.changes", {"project_or_path": str(path)})["result"]
    assert [e["path"] for e in changes["entries"]] == [str(path)]


def test_statuses_noted_before_a_send_arrive_as_the_last_one(
    rt: Runtime, daemon: DaemonHandle
) -> None:
    """Reports merged by the sender end where sending them one by one would: a new
    status without an activity clears the one before it."""
    table = hooks(rt)
    table["on_session_start"](session_id=S, platform="telegram", model="m")
    rt.sender.stop()  # nothing sent until the flush below: every report is merged
    table["pre_tool_call"](tool_name="terminal", args={}, session_id=S, tool_call_id="c")
    table["post_llm_call"](session_id=S, platform="telegram")

    rt.flush()

    me = daemon.call("session.get", {"session_id": S})["result"]
    assert (me["status"], me["activity"], me["tools"]) == ("waiting-for-user", "", ["terminal"])
    assert rt.status.sent == 1


def test_one_thread_sends_statuses_reads_writes_and_heartbeats(
    rt: Runtime, daemon: DaemonHandle, tmp_path: Any
) -> None:
    hooks(rt)["on_session_start"](session_id=S, platform="cli", model="m")
    (tmp_path / "a.txt").write_text("x")
    tool_call(rt, "read_file", {"path": str(tmp_path / "a.txt")})
    tool_call(rt, "write_file", {"path": str(tmp_path / "b.txt"), "content": "x"})
    rt.flush()

    names = sorted(t.name for t in threading.enumerate() if t.name.startswith("meshd-"))

    assert names == ["meshd-responder", "meshd-sender"]
