"""``meshctl mcp`` with the official MCP client over stdio, against a real meshd.

Each test starts the server as an agent would (a subprocess on stdin/stdout) and
reads what the daemon says about it with raw JSON-RPC, never through the server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.conftest import DaemonHandle, MeshEnv
from tests.mcp.conftest import call, doc, mcp_session
from tests.support import wait_for

from meshctl.agent import tools as agent_tools

pytestmark = pytest.mark.anyio


def live(daemon: DaemonHandle, source: str | None = None) -> list[dict[str, Any]]:
    sessions = daemon.call("session.list", {})["result"]["sessions"]
    return [s for s in sessions if source is None or s.get("source") == source]


def register(daemon: DaemonHandle, sid: str, **fields: Any) -> None:
    """Another session, on a process that stays alive (this test's)."""
    params = {"session_id": sid, "source": "cli", "pid": os.getpid(), **fields}
    assert "result" in daemon.call("session.register", params)


class TestServer:
    """The server is one mesh session: listed while it runs, gone after."""

    async def test_initialize_list_tools_and_the_session_it_is(
        self, daemon: DaemonHandle, mesh_env: MeshEnv, tmp_path: Path
    ) -> None:
        async with mcp_session(mesh_env.env, cwd=tmp_path) as s:
            listed = await s.list_tools()
            names = [t.name for t in listed.tools]
            mine = wait_for(lambda: live(daemon, "mcp"), what="the mcp session")

        assert names == [t.name for t in agent_tools.tools_for("compact")]
        assert {t.name: t.input_schema for t in listed.tools} == {
            t.name: t.parameters for t in agent_tools.tools_for("compact")
        }
        assert len(mine) == 1
        assert mine[0]["cwd"] == str(tmp_path)
        assert mine[0]["session_id"].startswith("mcp:")
        wait_for(lambda: not live(daemon, "mcp"), what="the session ended with the server")

    async def test_the_toolset_fits_the_token_budget(
        self, daemon: DaemonHandle, mesh_env: MeshEnv
    ) -> None:
        """What a model is offered by default costs at most 600 tokens (JSON chars / 4)."""
        async with mcp_session(mesh_env.env) as s:
            listed = await s.list_tools()
        sent = [t.model_dump(by_alias=True, exclude_none=True) for t in listed.tools]
        tokens = len(json.dumps(sent, separators=(",", ":"), ensure_ascii=False)) // 4

        assert tokens <= 600

    async def test_full_flag_lists_every_tool(
        self, daemon: DaemonHandle, mesh_env: MeshEnv
    ) -> None:
        async with mcp_session(mesh_env.env, "--full") as s:
            listed = await s.list_tools()

        assert [t.name for t in listed.tools] == [t.name for t in agent_tools.tools_for("full")]

    async def test_source_task_and_folder_from_the_command_line(
        self, daemon: DaemonHandle, mesh_env: MeshEnv, tmp_path: Path
    ) -> None:
        args = ("--source", "codex", "--task", "release notes", "--cwd", str(tmp_path))
        async with mcp_session(mesh_env.env, *args):
            mine = wait_for(lambda: live(daemon, "codex"), what="the codex session")

        assert mine[0]["task"] == "release notes"
        assert mine[0]["cwd"] == str(tmp_path)


class TestTools:
    """Every compact tool, called as a model would, does what it says on the daemon."""

    async def test_sessions_lists_another_sessions_task(
        self, daemon: DaemonHandle, mesh_env: MeshEnv
    ) -> None:
        register(daemon, "cli:other", task="refactor the parser")
        async with mcp_session(mesh_env.env) as s:
            text = await call(s, "mesh_sessions")

        listed = doc(text)
        assert [o["session_id"] for o in listed["sessions"]] == ["cli:other"]
        assert listed["sessions"][0]["task"] == "refactor the parser"
        assert "not from the user" in listed["framing"]

    async def test_claim_sets_the_task_and_release_frees_it(
        self, daemon: DaemonHandle, mesh_env: MeshEnv, tmp_path: Path
    ) -> None:
        async with mcp_session(mesh_env.env, cwd=tmp_path) as s:
            granted = doc(await call(s, "mesh_claim", {"resources": ["a.py"],
                                                       "reason": "fixing the parser"}))  # fmt: skip
            held = daemon.call("claim.list", {})["result"]["claims"]
            me = live(daemon, "mcp")[0]
            released = doc(await call(s, "mesh_claim", {"action": "release",
                                                        "resources": ["a.py"]}))  # fmt: skip
            after = daemon.call("claim.list", {})["result"]["claims"]

        assert granted["status"] == "granted"
        assert [c["resource"] for c in held] == [f"file:{tmp_path / 'a.py'}"]
        assert me["task"] == "fixing the parser"  # the first call that said what it does
        assert "error" not in released
        assert after == []

    async def test_msg_send_reaches_the_other_inbox_and_inbox_reads_mine(
        self, daemon: DaemonHandle, mesh_env: MeshEnv
    ) -> None:
        register(daemon, "cli:other")
        async with mcp_session(mesh_env.env) as s:
            sent = doc(await call(s, "mesh_msg", {"action": "send", "to": "cli:other",
                                                  "text": "hello there"}))  # fmt: skip
            me = live(daemon, "mcp")[0]["session_id"]
            daemon.call("message.send", {"session_id": "cli:other", "to": me, "text": "hi back"})
            inbox = await call(s, "mesh_msg", {"action": "inbox"})
        theirs = daemon.call("message.inbox", {"session_id": "cli:other"})["result"]["items"]

        assert "error" not in sent
        assert [i["text"] for i in theirs] == ["hello there"]
        assert "hi back" in inbox

    async def test_ask_gets_the_status_answer_of_a_session_without_responder(
        self, daemon: DaemonHandle, mesh_env: MeshEnv
    ) -> None:
        register(daemon, "cli:other", task="writing the changelog")
        async with mcp_session(mesh_env.env) as s:
            answer = doc(await call(s, "mesh_ask", {"to": "cli:other", "question": "busy?",
                                                    "wait_s": 2}))  # fmt: skip

        assert answer["answered_by"] == "status"
        assert "writing the changelog" in answer["answer"]

    async def test_notes_add_then_list(self, daemon: DaemonHandle, mesh_env: MeshEnv) -> None:
        async with mcp_session(mesh_env.env) as s:
            added = doc(await call(s, "mesh_notes", {"action": "add", "text": "db on :5433"}))
            listed = await call(s, "mesh_notes", {"action": "list"})

        assert "error" not in added
        assert "db on :5433" in listed

    async def test_signal_emit_then_wait_sees_it(
        self, daemon: DaemonHandle, mesh_env: MeshEnv
    ) -> None:
        async with mcp_session(mesh_env.env) as s:
            emitted = doc(await call(s, "mesh_signal", {"action": "emit", "name": "built",
                                                        "payload": {"ok": True}}))  # fmt: skip
            waited = doc(await call(s, "mesh_signal", {"action": "wait", "name": "built",
                                                       "after": 0, "wait_s": 1}))  # fmt: skip

        assert "error" not in emitted
        assert waited["received"] is True
        assert waited["payload"] == {"ok": True}

    async def test_once_reserve_done_then_another_reserve_is_refused(
        self, daemon: DaemonHandle, mesh_env: MeshEnv
    ) -> None:
        async with mcp_session(mesh_env.env) as s:
            first = doc(await call(s, "mesh_once", {"action": "reserve", "key": "mail:42"}))
            done = doc(await call(s, "mesh_once", {"action": "done", "key": "mail:42"}))
            again = doc(await call(s, "mesh_once", {"action": "reserve", "key": "mail:42"}))

        assert first["status"] == "reserved"
        assert "error" not in done
        assert again["status"] == "done"

    async def test_an_unknown_tool_is_an_error_result(
        self, daemon: DaemonHandle, mesh_env: MeshEnv
    ) -> None:
        async with mcp_session(mesh_env.env) as s:
            result = await s.call_tool("mesh_nope", {})

        assert result.is_error is True


class TestWhatArrived:
    """MCP has no hook between turns: each tool result carries what arrived, framed."""

    async def test_a_message_rides_on_the_next_tool_result_once(
        self, daemon: DaemonHandle, mesh_env: MeshEnv
    ) -> None:
        register(daemon, "cli:other")
        async with mcp_session(mesh_env.env) as s:
            await call(s, "mesh_sessions")
            me = live(daemon, "mcp")[0]["session_id"]
            daemon.call("message.send", {"session_id": "cli:other", "to": me,
                                         "text": "please rebase first"})  # fmt: skip
            first = await call(s, "mesh_sessions")
            second = await call(s, "mesh_sessions")

        assert "please rebase first" in first
        assert "not from the user" in first.split("please rebase first")[0]
        assert "please rebase first" not in second

    async def test_a_question_during_a_tool_call_reaches_the_model_and_its_late_answer_the_asker(
        self, daemon: DaemonHandle, mesh_env: MeshEnv
    ) -> None:
        """Inside a mesh tool call the server is the live responder: the question is
        handed over with that call's result; answered later, it reaches the inbox."""
        register(daemon, "cli:asker")
        async with mcp_session(mesh_env.env) as s:
            await call(s, "mesh_sessions")
            me = live(daemon, "mcp")[0]["session_id"]
            asked: dict[str, Any] = {}

            def ask() -> None:
                # asked once the tool call waits in the daemon (a fixed 0.5 s could be
                # before the call began, or after it ended, on a loaded machine)
                wait_for(
                    lambda: daemon.call("mesh.info")["result"]["counts"]["signal_waits"] == 1,
                    what="the tool call's wait parked",
                )
                asked.update(daemon.call("query.ask", {"session_id": "cli:asker", "to": me,
                                                       "question": "which branch?",
                                                       "timeout": 1.0})["result"])  # fmt: skip

            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, ask)
                waited = await call(s, "mesh_signal", {"action": "wait", "name": "never",
                                                       "wait_s": 5})  # fmt: skip
            query_id = int(waited.split("question #")[1].split(":")[0])
            await call(s, "mesh_msg", {"action": "reply", "id": query_id, "text": "main"})
        inbox = daemon.call("message.inbox", {"session_id": "cli:asker"})["result"]["items"]

        assert "which branch?" in waited
        assert asked.get("timed_out") is True  # nobody answered within the ask
        assert any("main" in str(i.get("text")) for i in inbox)

    async def test_outside_a_tool_call_the_status_responder_answers_at_once(
        self, daemon: DaemonHandle, mesh_env: MeshEnv
    ) -> None:
        register(daemon, "cli:asker")
        async with mcp_session(mesh_env.env) as s:
            await call(s, "mesh_sessions")
            me = live(daemon, "mcp")[0]["session_id"]
            answer = daemon.call("query.ask", {"session_id": "cli:asker", "to": me,
                                               "question": "there?", "timeout": 5})  # fmt: skip

        assert answer["result"]["answered_by"] == "status"
        assert not answer["result"].get("timed_out")


class TestDaemonDown:
    """Without meshd the server starts, lists its tools and answers every call in one
    line; once meshd is back, the next call registers."""

    async def test_down_then_up(self, mesh_env: MeshEnv) -> None:
        async with mcp_session(mesh_env.env) as s:
            listed = await s.list_tools()
            down = await call(s, "mesh_sessions")
            handle = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket,
                                  state_dir=mesh_env.state_dir)  # fmt: skip
            handle.start()
            try:
                up = await wait_for_text(s, lambda t: '"you"' in t)
                mine = live(handle, "mcp")
            finally:
                handle.stop()

        assert len(listed.tools) == len(agent_tools.tools_for("compact"))
        assert "unreachable" in down
        assert len(down.splitlines()) == 1
        assert doc(up)["you"] == mine[0]["session_id"]


async def wait_for_text(s: Any, ok: Any, timeout: float = 15.0) -> str:
    """Call mesh_sessions until its text satisfies ``ok`` (the server backs off a while)."""
    deadline = time.monotonic() + timeout
    while True:
        text = await call(s, "mesh_sessions")
        if ok(text) or time.monotonic() > deadline:
            return text
        await anyio.sleep(0.2)


def test_without_the_mcp_package_the_command_says_how_to_get_it(
    mesh_env: MeshEnv, tmp_path: Path
) -> None:
    """A clear one-line error, exit 1, when the SDK is missing (it is an extra)."""
    shadow = tmp_path / "shadow"
    (shadow / "mcp").mkdir(parents=True)
    (shadow / "mcp" / "__init__.py").write_text("raise ImportError('no mcp here')\n")
    env = {**mesh_env.env, "PYTHONPATH": str(shadow)}
    r = subprocess.run([sys.executable, "-m", "meshctl", "mcp"], env=env, capture_output=True,
                       text=True, stdin=subprocess.DEVNULL, timeout=60)  # fmt: skip

    assert r.returncode == 1
    assert "session-mesh[mcp]" in r.stderr
