"""A Claude Code session and a Hermes session in one repo see each other, and each is
warned about the other's claims: the real Claude Code CLI and the real hermes-agent,
each against its scripted model, on one meshd."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.claude.conftest import ClaudeProject
from tests.claude.fake_anthropic import FakeAnthropic, Text, Tool, tools_then_done
from tests.conftest import DaemonHandle
from tests.hermes.conftest import Hermes, hermes, hermes_bin  # noqa: F401 (fixtures)
from tests.hermes.fake_llm import FakeLLM, Move
from tests.hermes.fake_llm import Text as HText
from tests.hermes.fake_llm import Tool as HTool

pytestmark = pytest.mark.slow

MESH = "mcp__session-mesh__"


def test_claude_code_and_hermes_in_one_repo_see_and_warn_each_other(
    daemon: DaemonHandle,
    project: ClaudeProject,
    hermes: Hermes,  # noqa: F811 (the fixture)
) -> None:
    """Claude Code claims c.py and stays open; Hermes, working in the same repo, claims
    h.py, lists Claude Code's session and is warned writing c.py; mid-turn, Claude
    Code's next prompt lists the Hermes session and is warned writing h.py."""
    repo = project.root
    claude_side = tools_then_done([
        Tool(MESH + "mesh_claim", {"resources": ["c.py"], "reason": "claude reworks c"}),
    ])  # fmt: skip
    second_turn = [
        Tool(MESH + "mesh_sessions", {}),
        Tool("Write", {"file_path": str(repo / "h.py"), "content": "from claude\n"}),
    ]
    turn = {"n": 0}

    def claude_script(messages: list[dict[str, Any]]) -> Any:
        if turn["n"] == 0:
            return claude_side(messages)
        done = sum(1 for m in messages if m.get("role") == "assistant") - 2  # turn 1's moves
        return second_turn[done] if done < len(second_turn) else Text("CLAUDE-DONE")

    with FakeAnthropic(claude_script) as anthropic:
        chat = project.chat(anthropic)
        try:
            chat.say("claim c.py")
            turn["n"] = 1
            seen_by_claude: list[str] = []

            def hermes_script(messages: list[dict[str, Any]]) -> Move:
                tools = [m for m in messages if m.get("role") == "tool"]
                if len(tools) == 0:
                    return HTool("mesh_claim", {"resources": [str(repo / "h.py")],
                                                "reason": "hermes reworks h"})  # fmt: skip
                if len(tools) == 1:
                    return HTool("mesh_sessions", {})
                if len(tools) == 2:
                    seen_by_claude.append(json.dumps(chat.say("look around, then edit h.py")))
                    return HTool("write_file", {"path": str(repo / "c.py"), "content": "h\n"})
                return HText("HERMES-DONE")

            with FakeLLM(hermes_script) as llm:
                hermes.config(llm.url)
                hermes.install()
                done = hermes.run("chat", "-Q", "-q", "work on the repo", "-t", "mesh,file",
                                  cwd=repo)  # fmt: skip
        finally:
            assert chat.close() == 0

    assert done.returncode == 0, done.stderr[-3000:]
    hermes_results = llm.tool_messages()
    listed = json.loads(hermes_results[1])["sessions"]
    claude_ids = [s["session_id"] for s in listed if s["source"] == "claude-code"]
    assert len(claude_ids) == 1
    assert "[Session Mesh warning]" in hermes_results[2]
    assert claude_ids[0] in hermes_results[2]
    assert "claude reworks c" in hermes_results[2]
    mcp_listing = anthropic.tool_results()[1]
    assert '"source": "cli"' in mcp_listing  # the Hermes chat, seen from Claude Code
    told = anthropic.seen_text()
    warning = told[told.index("[Session Mesh warning]") :]
    assert "hermes reworks h" in warning
    assert (repo / "h.py").read_text() == "from claude\n"
    assert (repo / "c.py").read_text() == "h\n"
    assert seen_by_claude
