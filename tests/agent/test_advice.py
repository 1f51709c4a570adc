"""The pre-write check (meshctl.agent.advice) against a real meshd: approval only when it
matters, presence at most one short line, holders named with task, reason and branch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.agent.test_tools import Ctx
from tests.conftest import DaemonHandle

from meshctl import Mesh
from meshctl.agent import advice


@pytest.fixture
def mesh(daemon: DaemonHandle) -> Any:
    with Mesh("test", daemon.socket, autostart=False, timeout=10) as m:
        yield m


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    (tmp_path / "proj").mkdir()
    return (tmp_path / "proj").resolve()


def register(mesh: Mesh, sid: str, **fields: Any) -> None:
    mesh.call("session.register", {"session_id": sid, **fields})


def test_mere_presence_is_one_informational_line_per_turn(mesh: Mesh, proj: Path) -> None:
    register(mesh, "cli:me", cwd=str(proj))
    register(mesh, "cli:b", cwd=str(proj), task="writing the docs", branch="main")
    me = Ctx(mesh, "cli:me", cwd=str(proj))
    target = [str(proj / "a.py")]

    first = advice.before_write(me, target)
    later = advice.before_write(me, target, told=True)

    assert first.level == "info"
    assert "\n" not in first.text
    assert "cli:b (writing the docs, branch main)" in first.text
    assert "approval" not in first.text
    assert later == advice.NOTHING


def test_a_claim_asks_for_approval_naming_task_reason_and_branch(mesh: Mesh, proj: Path) -> None:
    register(mesh, "cli:me", cwd=str(proj))
    register(mesh, "cli:b", cwd=str(proj), task="refactor auth", branch="feat/auth")
    got = mesh.call("claim.acquire", {"session_id": "cli:b", "resources": [str(proj / "a.py")],
                                      "reason": "migrating the schema"})  # fmt: skip
    assert got["status"] == "granted"
    me = Ctx(mesh, "cli:me", cwd=str(proj))

    said = advice.before_write(me, [str(proj / "a.py")], told=True)

    assert said.level == "approve"
    assert "reason: migrating the schema" in said.text
    assert "task: refactor auth" in said.text
    assert "branch feat/auth" in said.text
    assert "approval" in said.text


def test_a_recent_change_of_that_very_file_asks_for_approval(mesh: Mesh, proj: Path) -> None:
    """The other session also works in the folder: it is named for the change (the daemon
    named it for its folder only, and the write passed as mere presence)."""
    register(mesh, "cli:me", cwd=str(proj))
    register(mesh, "cli:b", cwd=str(proj), task="fixing the parser")
    mesh.call("board.changed", {"session_id": "cli:b", "paths": [str(proj / "a.py")]})
    me = Ctx(mesh, "cli:me", cwd=str(proj))

    same = advice.before_write(me, [str(proj / "a.py")])
    other_file = advice.before_write(me, [str(proj / "b.py")])

    assert same.level == "approve"
    assert f"cli:b recently changed {proj / 'a.py'}" in same.text
    assert "task: fixing the parser" in same.text
    assert other_file.level == "info"


def test_nothing_to_say_alone_or_with_the_daemon_down(mesh: Mesh, proj: Path) -> None:
    register(mesh, "cli:me", cwd=str(proj))

    assert advice.before_write(Ctx(mesh, "cli:me"), [str(proj / "a.py")]) == advice.NOTHING
    assert advice.before_write(Ctx(None, "cli:me"), [str(proj / "a.py")]) == advice.NOTHING


def test_start_note_names_holders_and_who_works_there() -> None:
    """What a session is told at its start about its folder (Hermes's first turn, Claude
    Code's SessionStart): the claims in it with their reasons, then who works there."""
    check = {
        "claims": [{"session_id": "cli:a", "resource": "file:/p/x.py", "reason": "split x",
                    "task": "refactor", "branch": "feat"}],
        "present": [{"session_id": "tui:b", "task": "docs", "why": "cwd"}],
    }  # fmt: skip
    note = advice.start_note("/p", check)

    assert note.splitlines()[0] == "- [Session Mesh] Claimed by other sessions of your user in /p:"
    assert "cli:a" in note
    assert "split x" in note
    assert "tui:b (docs)" in note.splitlines()[-1]
    assert advice.start_note("/p", {"claims": [], "present": []}) == ""
    assert advice.start_note("/p", None) == ""
