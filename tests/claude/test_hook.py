"""The Claude Code hook entry point, run as Claude Code runs it, against a real meshd.

Each test feeds one event (the JSON Claude Code writes on the hook's stdin) to
``python -S …/meshctl/claude/hook.py`` and reads the daemon with raw JSON-RPC. The
hook's parent is this test process, so the session is ``claude-code:<this pid>``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.claude.conftest import HOOK, context_of, run_hook
from tests.conftest import DaemonHandle, MeshEnv

ME = f"claude-code:{os.getpid()}"


def event(name: str, cwd: Path, **fields: Any) -> dict[str, Any]:
    return {"session_id": "0f8406be-776b-443b-ac0e-fdcfee056491", "cwd": str(cwd),
            "transcript_path": str(cwd / "t.jsonl"), "hook_event_name": name, **fields}  # fmt: skip


def mine(daemon: DaemonHandle) -> dict[str, Any] | None:
    listed = daemon.call("session.list", {})["result"]["sessions"]
    return next((s for s in listed if s["session_id"] == ME), None)


def other(daemon: DaemonHandle, sid: str = "cli:other", **fields: Any) -> None:
    params = {"session_id": sid, "source": "cli", "pid": os.getpid(), **fields}
    assert "result" in daemon.call("session.register", params)


def started(mesh_env: MeshEnv, cwd: Path) -> subprocess.CompletedProcess[str]:
    r = run_hook(mesh_env.env, event("SessionStart", cwd, source="startup", model="m-1"))
    assert r.returncode == 0, r.stderr
    return r


def git_repo(path: Path, branch: str = "feature/x") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", branch, str(path)], check=True)
    return path


class TestSessionStart:
    def test_registers_the_claude_code_process_with_its_place(
        self, daemon: DaemonHandle, mesh_env: MeshEnv, tmp_path: Path
    ) -> None:
        repo = git_repo(tmp_path / "repo")
        r = started(mesh_env, repo)
        s = mine(daemon)

        assert r.stdout == ""  # nobody else here: nothing to say
        assert s is not None
        assert (s["source"], s["pid"], s["liveness"]) == ("claude-code", os.getpid(), "process")
        assert (s["cwd"], s["repo"], s["branch"]) == (str(repo), str(repo), "feature/x")
        assert s["model"] == "m-1"

    def test_says_who_else_works_in_the_folder(
        self, daemon: DaemonHandle, mesh_env: MeshEnv, tmp_path: Path
    ) -> None:
        other(daemon, task="porting the CLI")
        daemon.call("claim.acquire", {"session_id": "cli:other", "resources": [str(tmp_path / "a.py")],
                                      "reason": "porting a.py"})  # fmt: skip
        context = context_of(started(mesh_env, tmp_path).stdout)

        assert "cli:other" in context
        assert "porting a.py" in context
        assert context.index("not from the user") < context.index("cli:other")


class TestPrompt:
    def test_the_prompt_becomes_the_task_and_the_inbox_is_handed_over_once(
        self, daemon: DaemonHandle, mesh_env: MeshEnv, tmp_path: Path
    ) -> None:
        started(mesh_env, tmp_path)
        other(daemon)
        daemon.call("message.send", {"session_id": "cli:other", "to": ME, "text": "rebase first"})
        prompt = event("UserPromptSubmit", tmp_path, prompt="fix the\nflaky test in ci")
        first = run_hook(mesh_env.env, prompt)
        second = run_hook(mesh_env.env, prompt)
        s = mine(daemon)

        assert s is not None
        assert (s["task"], s["status"]) == ("fix the flaky test in ci", "thinking")
        assert "rebase first" in context_of(first.stdout)
        assert "cli:other" in context_of(first.stdout)
        assert second.stdout == ""  # acknowledged: handed over once

    def test_a_session_the_daemon_forgot_registers_again(
        self, daemon: DaemonHandle, mesh_env: MeshEnv, tmp_path: Path
    ) -> None:
        started(mesh_env, tmp_path)
        daemon.call("session.end", {"session_id": ME})
        r = run_hook(mesh_env.env, event("UserPromptSubmit", tmp_path, prompt="carry on"))
        s = mine(daemon)

        assert r.returncode == 0
        assert s is not None
        assert s["task"] == "carry on"


class TestTools:
    def test_a_write_to_a_claimed_file_warns_and_never_blocks(
        self, daemon: DaemonHandle, mesh_env: MeshEnv, tmp_path: Path
    ) -> None:
        started(mesh_env, tmp_path)
        target = tmp_path / "parser.py"
        other(daemon, task="split the parser", branch="feature/parse")
        daemon.call("claim.acquire", {"session_id": "cli:other", "resources": [str(target)],
                                      "reason": "splitting it"})  # fmt: skip
        pre = event("PreToolUse", tmp_path, tool_name="Write",
                    tool_input={"file_path": "parser.py", "content": "x"})  # fmt: skip
        r = run_hook(mesh_env.env, pre)
        out = json.loads(r.stdout)["hookSpecificOutput"]

        assert r.returncode == 0
        assert set(out) == {"hookEventName", "additionalContext"}  # no permission decision
        assert out["hookEventName"] == "PreToolUse"
        assert str(target) in out["additionalContext"]
        assert "cli:other" in out["additionalContext"]
        assert "splitting it" in out["additionalContext"]

    def test_a_write_nobody_else_touches_says_nothing(
        self, daemon: DaemonHandle, mesh_env: MeshEnv, tmp_path: Path
    ) -> None:
        started(mesh_env, tmp_path)
        for tool, key in (("Edit", "file_path"), ("NotebookEdit", "notebook_path")):
            pre = event("PreToolUse", tmp_path, tool_name=tool, tool_input={key: "n.ipynb"})
            r = run_hook(mesh_env.env, pre)
            assert (r.returncode, r.stdout) == (0, "")
        s = mine(daemon)
        assert s is not None
        assert s["status"] == "tool-running"

    def test_written_paths_reach_the_board_and_reads_are_recorded(
        self, daemon: DaemonHandle, mesh_env: MeshEnv, tmp_path: Path
    ) -> None:
        """After a Read, another session's change to that file is told to this one."""
        started(mesh_env, tmp_path)
        other(daemon)
        post = event("PostToolUse", tmp_path, tool_name="Write",
                     tool_input={"file_path": "out.txt", "content": "x"})  # fmt: skip
        read = event("PostToolUse", tmp_path, tool_name="Read",
                     tool_input={"file_path": str(tmp_path / "in.txt")})  # fmt: skip
        assert run_hook(mesh_env.env, post).stdout == ""
        assert run_hook(mesh_env.env, read).stdout == ""
        changes = daemon.call("board.changes", {"project_or_path": str(tmp_path)})["result"]
        daemon.call(
            "board.changed", {"session_id": "cli:other", "paths": [str(tmp_path / "in.txt")]}
        )
        inbox = daemon.call("message.inbox", {"session_id": ME, "peek": True})["result"]["items"]

        assert [e["path"] for e in changes["entries"]] == [str(tmp_path / "out.txt")]
        assert any("in.txt" in str(i.get("text")) for i in inbox)


class TestEnd:
    def test_stop_waits_for_the_user_and_session_end_ends_it(
        self, daemon: DaemonHandle, mesh_env: MeshEnv, tmp_path: Path
    ) -> None:
        started(mesh_env, tmp_path)
        run_hook(mesh_env.env, event("Stop", tmp_path, stop_hook_active=False))
        waiting = mine(daemon)
        r = run_hook(mesh_env.env, event("SessionEnd", tmp_path, reason="prompt_input_exit"))

        assert waiting is not None
        assert waiting["status"] == "waiting-for-user"
        assert r.stdout == ""
        assert mine(daemon) is None


class TestQuiet:
    def test_with_the_daemon_down_every_event_prints_nothing(
        self, mesh_env: MeshEnv, tmp_path: Path
    ) -> None:
        events = [
            event("SessionStart", tmp_path, source="startup"),
            event("UserPromptSubmit", tmp_path, prompt="hi"),
            event("PreToolUse", tmp_path, tool_name="Write", tool_input={"file_path": "a"}),
            event("PostToolUse", tmp_path, tool_name="Write", tool_input={"file_path": "a"}),
            event("Stop", tmp_path),
            event("SessionEnd", tmp_path, reason="other"),
        ]
        for e in events:
            r = run_hook(mesh_env.env, e)
            assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), e["hook_event_name"]

    def test_input_that_is_not_an_event_is_ignored(
        self, daemon: DaemonHandle, mesh_env: MeshEnv
    ) -> None:
        for raw in ("", "not json", "[1, 2]", '{"hook_event_name": "Nope"}'):
            r = subprocess.run([sys.executable, "-S", str(HOOK)], input=raw, env=mesh_env.env,
                               capture_output=True, text=True, timeout=60)  # fmt: skip
            assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), raw

    def test_the_hook_loads_no_third_party_module_nor_json(
        self, daemon: DaemonHandle, mesh_env: MeshEnv, tmp_path: Path
    ) -> None:
        """Standard library only (and without site-packages: ``python -S``); a write
        nobody else touches loads neither json nor socket (with re, enum and typing:
        a third of what S pays to start): the client's wire, json's C parts, does it."""
        started(mesh_env, tmp_path)
        write = event("PreToolUse", tmp_path, tool_name="Write", tool_input={"file_path": "a"})
        r = subprocess.run(
            [sys.executable, "-S", "-X", "importtime", str(HOOK)], input=json.dumps(write),
            env=mesh_env.env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        loaded = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if "|" in line}
        top = {m.split(".")[0] for m in loaded}

        assert r.returncode == 0
        assert mine(daemon) is not None
        assert not top & {"anyio", "msgspec", "click", "platformdirs", "mcp", "pydantic", "site"}
        assert not top & {"json", "socket", "re", "enum", "typing"}

    def test_a_warning_loads_the_advice_alone(
        self, daemon: DaemonHandle, mesh_env: MeshEnv, tmp_path: Path
    ) -> None:
        """The warning's text comes from meshctl.agent.advice, without the tool table,
        typing or dataclasses (together more than the rest of the hook's start-up)."""
        started(mesh_env, tmp_path)
        other(daemon)
        daemon.call(
            "claim.acquire", {"session_id": "cli:other", "resources": [str(tmp_path / "a")]}
        )
        write = event("PreToolUse", tmp_path, tool_name="Write", tool_input={"file_path": "a"})
        r = subprocess.run(
            [sys.executable, "-S", "-X", "importtime", str(HOOK)], input=json.dumps(write),
            env=mesh_env.env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        loaded = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if "|" in line}

        assert "[Session Mesh warning]" in r.stdout
        assert "meshctl.agent.advice" in loaded
        assert not loaded & {"meshctl.agent.tools", "meshctl.agent.context", "typing",
                             "dataclasses", "json", "re"}  # fmt: skip
