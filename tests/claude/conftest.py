"""Claude Code on the mesh: the hook run as Claude Code runs it, and the real CLI.

``scripts/test.sh`` installs ``@anthropic-ai/claude-code`` (pinned) into
``.npm-claude/`` when ``npm`` is there; ``CLAUDE_CODE_BIN`` points elsewhere. The CLI
runs in print mode (``claude -p``) against :class:`FakeAnthropic` on loopback, with a
home of its own (so ``~/.claude.json`` and ``~/.claude/`` are the test's), after
``meshctl claude install --project`` wrote the hooks and the MCP server there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.claude.fake_anthropic import FakeAnthropic
from tests.conftest import MeshEnv

CLAUDE_CODE_VERSION = "2.1.328"
ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "src" / "meshctl" / "claude" / "hook.py"


def claude_path() -> Path:
    return Path(os.environ.get("CLAUDE_CODE_BIN") or ROOT / ".npm-claude/node_modules/.bin/claude")


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    path = claude_path()
    if not path.exists():
        pytest.skip(
            f"Claude Code is not installed at {path}: scripts/test.sh installs "
            f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION} there when npm is available "
            "(or set CLAUDE_CODE_BIN)"
        )
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    version = out.stdout.split()[0] if out.stdout.split() else out.stderr.strip()
    assert version == CLAUDE_CODE_VERSION, f"{path} is Claude Code {version}"
    return path


def run_hook(env: dict[str, str], event: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """The hook as Claude Code runs it (``python -S hook.py``, the event on stdin)."""
    return subprocess.run(
        [sys.executable, "-S", str(HOOK)], input=json.dumps(event), env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def context_of(out: str) -> str:
    """The additional context a hook printed (empty when it printed nothing)."""
    if not out.strip():
        return ""
    return str(json.loads(out)["hookSpecificOutput"]["additionalContext"])


@dataclass
class ClaudeProject:
    """A project folder with the mesh installed for Claude Code, and a home for it."""

    root: Path
    home: Path
    env: dict[str, str]
    bin: Path
    runs: list[subprocess.CompletedProcess[str]] = field(default_factory=list)

    def claude_env(self, fake: FakeAnthropic) -> dict[str, str]:
        return {
            **self.env, "HOME": str(self.home), "ANTHROPIC_BASE_URL": fake.url,
            "ANTHROPIC_API_KEY": "sk-test-dummy", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_MCP_STARTUP_WAIT_MS": "60000",
        }  # fmt: skip

    def run(self, prompt: str, fake: FakeAnthropic, *args: str) -> subprocess.CompletedProcess[str]:
        """``claude -p PROMPT`` in the project; edits accepted, the mesh's MCP tools allowed."""
        r = subprocess.run(
            [str(self.bin), "-p", prompt, "--permission-mode", "acceptEdits",
             "--allowedTools", "mcp__session-mesh", *args],
            cwd=self.root, env=self.claude_env(fake), capture_output=True, text=True,
            timeout=240, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        self.runs.append(r)
        assert r.returncode == 0, f"claude exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
        return r

    def chat(self, fake: FakeAnthropic) -> Chat:
        """A session that takes several prompts (``--input-format stream-json``)."""
        proc = subprocess.Popen(
            [str(self.bin), "-p", "--input-format", "stream-json", "--output-format",
             "stream-json", "--verbose", "--permission-mode", "acceptEdits",
             "--allowedTools", "mcp__session-mesh"],
            cwd=self.root, env=self.claude_env(fake), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        return Chat(proc)


class Chat:
    """One Claude Code process, prompted turn by turn."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def say(self, text: str) -> dict[str, Any]:
        """Send a prompt; the turn's ``result`` message once the turn is over."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        message = {"type": "user", "message": {"role": "user", "content": text}}
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            assert line, (
                f"claude ended mid-turn: {self.proc.stderr.read() if self.proc.stderr else ''}"
            )
            doc = json.loads(line)
            if doc.get("type") == "result":
                return dict(doc)

    def close(self) -> int:
        """End the input; the exit code once Claude Code is done (pipes closed)."""
        try:
            self.proc.communicate(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.communicate()
            for pipe in (self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    pipe.close()
        return self.proc.returncode


@pytest.fixture
def project(claude_bin: Path, mesh_env: MeshEnv, tmp_path: Path) -> ClaudeProject:
    """A project with ``meshctl claude install --project`` done (its own home)."""
    home = tmp_path / "home"
    home.mkdir()
    root = tmp_path / "proj"
    root.mkdir()
    env = {**mesh_env.env, "HOME": str(home)}
    r = subprocess.run([sys.executable, "-m", "meshctl", "claude", "install", "--project",
                        str(root)], env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return ClaudeProject(root=root, home=home, env=mesh_env.env, bin=claude_bin)
