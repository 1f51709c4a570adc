"""Pure pieces of the CLI: renderers, ages, paths, params -- no daemon, no subprocess."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
import pytest

from meshctl.cli import _output, _time, raw
from meshctl.cli._git import GitPlace, git_place
from meshctl.cli.lifecycle import register_params
from meshctl.cli.sessions import describe, render_list, render_one

HOME = "/home/u"


def session(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "session_id": "cli:20261129-1f3a9c",
        "profile": "default",
        "source": "cli",
        "status": "idle",
        "task": "",
        "cwd": None,
        "branch": None,
        "age_s": 0.0,
        "stale": False,
        "claims": [],
    }
    base.update(fields)
    return base


class TestDescribe:
    def test_process_session_shows_idle_time(self) -> None:
        """A process session's line ends in its idle time, not the heartbeat age."""
        s = session(task="shell", liveness="process", status="idle", age_s=1, idle_s=300)

        assert describe(s, HOME) == "- cli:20261129-1f3a9c — shell, status: idle, idle 5m"

    def test_no_cwd_no_branch(self) -> None:
        """Unknown folder and branch are left out, not printed as None."""
        s = session(
            session_id="cron:finance-daily",
            source="cron",
            task="importing transactions",
            status="tool-running",
            age_s=42,
        )

        assert describe(s, HOME) == (
            "- cron:finance-daily — importing transactions, status: tool-running, 42s ago"
        )

    def test_waiting_for_user_and_stale(self) -> None:
        """A session waiting for its user shows its last task; stale is marked at the end."""
        s = session(
            session_id="gateway:telegram:home",
            source="gateway:telegram",
            status="waiting-for-user",
            task="summarised IBKR runtime status",
            age_s=150,
            stale=True,
        )

        assert describe(s, HOME) == (
            "- gateway:telegram:home — waiting for user, last task: summarised IBKR "
            "runtime status, 2m ago  [stale]"
        )

    def test_no_task(self) -> None:
        """An empty task reads 'no task'."""
        assert describe(session(age_s=3600 * 2 + 5), HOME).startswith(
            "- cli:20261129-1f3a9c — no task, status: idle, 2h ago"
        )


class TestRenderList:
    def test_header_and_lines(self) -> None:
        """The listing starts with the profile header, then one line a session."""
        text = render_list("work", [session(task="a"), session(session_id="x", task="b")], HOME)

        lines = text.splitlines()
        assert lines[0] == "Active sessions (profile work):"
        assert len(lines) == 3
        assert lines[2].startswith("- x (cli) — b")  # an id that does not say its source

    def test_empty(self) -> None:
        """No sessions: one line."""
        assert render_list("default", []) == "No active sessions (profile default)."

    def test_show_lists_claims(self) -> None:
        """sessions show prints fields and every claim."""
        s = session(
            task="t",
            cwd="/home/u/p",
            pid=42,
            claims=[
                {
                    "resource": "file:/home/u/p",
                    "mode": "exclusive",
                    "token": 7,
                    "since": _time.rfc3339(time.time() - 150),
                    "reason": "edit",
                }
            ],
        )

        text = render_one(s, HOME)

        assert "cwd:             ~/p" in text
        assert "pid:             42" in text
        assert "file:/home/u/p (exclusive, token 7, since 2m ago) — edit" in text


class TestFormatting:
    @pytest.mark.parametrize(
        ("seconds", "expected"),
        [
            (-1, "0s"),
            (0, "0s"),
            (59.9, "59s"),
            (60, "1m"),
            (3599, "59m"),
            (3600, "1h"),
            (86399, "23h"),
            (86400, "1d"),
        ],
    )
    def test_age(self, seconds: float, expected: str) -> None:
        """Ages are floored to the largest whole unit."""
        assert _time.age(seconds) == expected

    @pytest.mark.parametrize(
        ("seconds", "expected"), [(0, "0s"), (192, "3m 12s"), (3600, "1h"), (90061, "1d 1h")]
    )
    def test_duration(self, seconds: float, expected: str) -> None:
        """Uptimes show their two largest units."""
        assert _time.duration(seconds) == expected

    @pytest.mark.parametrize(
        ("path", "expected"),
        [
            ("/home/u", "~"),
            ("/home/u/p", "~/p"),
            ("/home/user2/p", "/home/user2/p"),
            ("/tmp", "/tmp"),
            (None, None),
        ],
    )
    def test_tilde(self, path: str | None, expected: str | None) -> None:
        """Only the home folder itself, or what is under it, becomes ~."""
        assert _output.tilde(path, HOME) == expected


class TestFailure:
    def test_error_document_shape(self) -> None:
        """The --json error document carries code, message and data.code."""
        doc = _output.no_session().to_json()

        assert doc["error"]["code"] == -32004
        assert doc["error"]["data"] == {"code": "NO_SESSION"}
        assert "session" in doc["error"]["message"]

    def test_exit_codes(self) -> None:
        """Unreachable 69, timeout 75, storage failure and other errors 1."""
        from meshd.protocol import errors as E

        assert _output.exit_code_for(E.MeshUnavailable("x")) == 69
        assert _output.exit_code_for(E.MeshTimeout("x")) == 75
        assert _output.exit_code_for(E.StorageUnavailable("x")) == 1
        assert _output.exit_code_for(E.UnknownSession("x")) == 1


class TestCallParams:
    def test_object(self) -> None:
        """A JSON object passes through."""
        assert raw.parse_params('{"a": 1}', "PARAMS_JSON") == {"a": 1}

    def test_bad_json_says_where(self) -> None:
        """Broken JSON is a usage error naming the line and column."""
        with pytest.raises(click.UsageError, match=r"not valid JSON.*line 1 column 2"):
            raw.parse_params("{a}", "PARAMS_JSON")

    def test_scalar_refused(self) -> None:
        """JSON-RPC params are an object or an array."""
        with pytest.raises(click.UsageError, match="object or array"):
            raw.parse_params("3", "stdin")


def params(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "task": "t",
        "source": None,
        "pid": None,
        "session_id": None,
        "liveness": "process",
        "expire_after": None,
        "parent": None,
        "slot": None,
        "queries": True,
        "messages": True,
        "status": None,
        "cwd": "/",
        "ppid": 4242,
        "host": "box",
    }
    args.update(overrides)
    return register_params(**args)


class TestRegisterParams:
    def test_process_liveness_speaks_for_the_parent(self) -> None:
        """Without --pid, a process session is tied to meshctl's caller."""
        assert params()["pid"] == 4242

    def test_heartbeat_without_pid_sends_none(self) -> None:
        """--liveness heartbeat without --pid ties the session to no process."""
        p = params(liveness="heartbeat")

        assert "pid" not in p
        assert p["liveness"] == "heartbeat"

    def test_explicit_pid_wins(self) -> None:
        """--pid is sent as given, in either liveness mode."""
        assert params(pid=7, liveness="heartbeat")["pid"] == 7

    def test_refusals_and_defaults(self) -> None:
        """--no-queries/--no-messages send false; unset options are not sent."""
        p = params(queries=False, messages=False)

        assert p["accept_queries"] is False
        assert p["accept_messages"] is False
        assert "source" not in p
        assert "status" not in p

    def test_deleted_cwd_is_left_out(self) -> None:
        """A working folder that no longer exists is not sent (nor looked up in git)."""
        p = params(cwd=None)

        assert "cwd" not in p
        assert "repo" not in p


class TestGitPlace:
    def test_repo_and_branch(self, tmp_path: Path) -> None:
        """A folder inside a repository reports its top level and branch."""
        (tmp_path / ".git").mkdir()
        (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/feat/auth\n")
        (tmp_path / "src" / "a").mkdir(parents=True)

        place = git_place(str(tmp_path / "src" / "a"))

        assert place == GitPlace(repo=str(tmp_path), branch="feat/auth", worktree=None)

    def test_linked_worktree_and_detached_head(self, tmp_path: Path) -> None:
        """A .git file points at the worktree's git folder; a detached HEAD has no branch."""
        gitdir = tmp_path / "main" / ".git" / "worktrees" / "wt"
        gitdir.mkdir(parents=True)
        (gitdir / "HEAD").write_text("0123456789abcdef0123456789abcdef01234567\n")
        wt = tmp_path / "wt"
        wt.mkdir()
        (wt / ".git").write_text(f"gitdir: {gitdir}\n")

        place = git_place(str(wt))

        assert place == GitPlace(repo=str(wt), branch=None, worktree=str(wt))

    def test_outside_git(self, tmp_path: Path) -> None:
        """Outside any repository every field is None."""
        assert git_place(str(tmp_path)) == GitPlace()
