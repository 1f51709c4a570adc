"""The real Claude Code CLI (``claude -p``) on the mesh, against a scripted endpoint.

``meshctl claude install --project`` put the hooks and the MCP server in the test's
project and home; what the daemon sees is read with raw JSON-RPC, what the model
was sent from the scripted endpoint's requests.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from tests.claude.conftest import ClaudeProject
from tests.claude.fake_anthropic import FakeAnthropic, Text, Tool, tools_then_done
from tests.conftest import DaemonHandle

pytestmark = pytest.mark.slow

MESH = "mcp__session-mesh__"


def sessions(daemon: DaemonHandle, source: str | None = None) -> list[dict[str, Any]]:
    listed = daemon.call("session.list", {})["result"]["sessions"]
    return [s for s in listed if source is None or s.get("source") == source]


def other(daemon: DaemonHandle, **fields: Any) -> None:
    params = {"session_id": "cli:other", "source": "cli", "pid": os.getpid(), **fields}
    assert "result" in daemon.call("session.register", params)


class TestClaudeCode:
    def test_the_session_is_listed_while_it_runs_and_gone_after(
        self, daemon: DaemonHandle, project: ClaudeProject
    ) -> None:
        seen: list[list[dict[str, Any]]] = []

        def script(messages: list[dict[str, Any]]) -> Text:
            seen.append(sessions(daemon, "claude-code"))
            return Text("done")

        with FakeAnthropic(script) as fake:
            project.run("rename the parser module", fake)

        assert len(seen[0]) == 1
        running = seen[0][0]
        assert running["session_id"].startswith("claude-code:")
        assert running["task"] == "rename the parser module"
        assert running["cwd"] == str(project.root)
        assert running["status"] == "thinking"
        assert sessions(daemon, "claude-code") == []

    def test_a_write_to_a_claimed_file_carries_the_warning_and_still_happens(
        self, daemon: DaemonHandle, project: ClaudeProject
    ) -> None:
        target = project.root / "parser.py"
        other(daemon, task="refactor the parser", branch="feature/parse")
        daemon.call("claim.acquire", {"session_id": "cli:other", "resources": [str(target)],
                                      "reason": "splitting the parser"})  # fmt: skip
        write = Tool("Write", {"file_path": str(target), "content": "x = 1\n"})

        with FakeAnthropic(tools_then_done([write])) as fake:
            project.run("edit the parser", fake)

        told = fake.seen_text()
        warning = told[told.index("[Session Mesh warning]") :]
        assert target.read_text() == "x = 1\n"
        assert "cli:other" in warning
        assert "splitting the parser" in warning
        assert "advisory" in warning
        assert "not from the user" in told[: told.index("[Session Mesh warning]")]

    def test_the_models_mesh_tool_lists_another_sessions_task_as_the_same_session(
        self, daemon: DaemonHandle, project: ClaudeProject
    ) -> None:
        other(daemon, task="write the release notes")
        seen: list[list[dict[str, Any]]] = []
        script = tools_then_done([Tool(MESH + "mesh_sessions", {})])

        def watching(messages: list[dict[str, Any]]) -> Any:
            seen.append(sessions(daemon, "claude-code"))
            return script(messages)

        with FakeAnthropic(watching) as fake:
            project.run("who else is here?", fake)

        result = fake.tool_results()[0]
        assert '"task": "write the release notes"' in result
        assert f'"you": "{seen[0][0]["session_id"]}"' in result  # the hooks' session, not a 2nd
        assert all(len(s) == 1 for s in seen)
        assert sessions(daemon, "mcp") == []

    def test_a_message_reaches_the_model_at_its_next_prompt(
        self, daemon: DaemonHandle, project: ClaudeProject
    ) -> None:
        other(daemon)
        with FakeAnthropic(lambda messages: Text("ok")) as fake:
            chat = project.chat(fake)
            try:
                chat.say("first question")
                me = sessions(daemon, "claude-code")[0]["session_id"]
                daemon.call("message.send", {"session_id": "cli:other", "to": me,
                                             "text": "please rebase onto main"})  # fmt: skip
                before = fake.seen_text()
                chat.say("second question")
                after = fake.seen_text()
            finally:
                assert chat.close() == 0
        unread = daemon.call("message.inbox", {"session_id": me, "peek": True})

        assert "please rebase onto main" not in before
        assert "please rebase onto main" in after
        assert "not from the user" in after[: after.index("please rebase onto main")]
        assert "error" in unread or unread["result"]["items"] == []  # acknowledged (or ended)
