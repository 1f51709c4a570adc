"""``meshctl board changed|files`` against the real daemon (and the pure renderers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from meshctl.cli.board import absolute, render_changed

from .conftest import Meshctl, OfflineEnv, Run

Daemon = Any


def ok(run: Run) -> Run:
    assert run.code == 0, run
    return run


def _register_in(env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "meshctl.cli", "register", "--task", "t", "--pid", str(os.getpid())],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def in_dir(cwd: Path, *args: str, env: dict[str, str]) -> Run:
    done = subprocess.run(
        [sys.executable, "-m", "meshctl.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Run(list(args), done.returncode, done.stdout, done.stderr)


class TestPure:
    def test_relative_paths_are_made_absolute(self) -> None:
        assert absolute("src/a.py", "/p") == "/p/src/a.py"
        assert absolute("/x/y", "/p") == "/x/y"
        assert absolute("~/y", "/p") == "~/y"

    def test_changed_says_who_was_told(self) -> None:
        text = render_changed(
            {"recorded": 2, "project": "/p", "projects": ["/p"], "notified": ["b"], "held": []}
        )

        assert text == "Recorded 2 changed files in /p.\nTold now: b."


class TestNames:
    def test_listing_is_files_and_changes_is_a_hidden_alias(self, meshctl: Meshctl) -> None:
        """``changed`` (report) and the listing no longer differ by one letter; the
        listing's old name ``changes`` still parses, unlisted."""
        top = ok(meshctl("board", "--help"))
        old = ok(meshctl("board", "changes", "--help"))
        new = ok(meshctl("board", "files", "--help"))

        listed = [line.split()[0] for line in top.out.split("Commands:")[1].splitlines() if line]
        assert "files" in listed
        assert "changed" in listed
        assert "changes" not in listed
        assert old.out.splitlines()[1:] == new.out.splitlines()[1:]


class TestWithDaemon:
    def test_needs_a_session(self, meshctl: Meshctl, offline_env: OfflineEnv) -> None:
        run = meshctl("board", "changed", "/x", "--json", env=offline_env.env)

        assert run.code == 1, run
        assert run.json()["error"]["data"]["code"] == "NO_SESSION"

    def test_changed_then_files(self, daemon: Daemon, short_tmp: Path) -> None:
        """Relative paths resolve against the cwd; the session in the project is told;
        ``files`` (no PATH) lists the cwd's project."""
        proj = Path(os.path.realpath(short_tmp)) / "proj"
        (proj / ".git").mkdir(parents=True)
        (proj / "src").mkdir()
        watcher = _register_in(daemon.env, proj)
        writer = _register_in(daemon.env, proj)
        env = {**daemon.env, "MESH_SESSION": writer}

        run = ok(
            in_dir(
                proj / "src",
                "board",
                "changed",
                "a.py",
                "b.py",
                "--summary",
                "auth",
                "--json",
                env=env,
            )
        )
        human = ok(in_dir(proj, "board", "changed", "src/c.py", env=env))
        listed = ok(in_dir(proj / "src", "board", "files", "--json", env=env))
        text = ok(in_dir(proj, "board", "files", env=daemon.env))
        old = ok(in_dir(proj / "src", "board", "changes", "--json", env=env))

        result = run.json()
        assert result["recorded"] == 2
        assert result["project"] == str(proj)
        assert result["notified"] == [watcher]
        assert "Recorded 1 changed file in" in human.out
        assert f"Told within 30 s, with your other recent changes: {watcher}." in human.out
        assert listed.json()["project"] == str(proj)
        assert [e["path"] for e in listed.json()["entries"]] == [
            f"{proj}/src/a.py",
            f"{proj}/src/b.py",
            f"{proj}/src/c.py",
        ]
        assert f"{writer}: src/a.py — auth" in text.out
        assert old.json() == listed.json()  # the old name still works
