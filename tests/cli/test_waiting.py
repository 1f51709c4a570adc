"""A waiting command says what it waits for and the time left (on a terminal only),
and says plainly when the wait ran out."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

from tests.cli.conftest import Meshctl
from tests.support import reaped, wait_for

from meshctl.cli import _terminal, _waiting
from meshctl.cli._waiting import describe_wait


def register(meshctl: Meshctl, env: dict[str, str], task: str) -> str:
    r = meshctl("register", "--task", task, "--liveness", "heartbeat", env=env)
    assert r.code == 0, r
    return r.out.strip()


def test_not_a_terminal_says_the_wait_ran_out(meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
    env = mesh_env.env
    a, b = register(meshctl, env, "holder"), register(meshctl, env, "waiter")
    assert meshctl("claim", "--session", a, "res:db", env=env).code == 0

    r = meshctl("claim", "--session", b, "res:db", "--wait", "0.3", env=env)

    assert r.code == 75, r
    assert "the wait ran out after 0.3 s; still held" in r.err
    assert "s left" not in r.err  # no countdown off a terminal


def test_terminal_shows_holder_and_time_left(
    meshctl: Meshctl, daemon: Any, mesh_env: Any, tmux: Any
) -> None:
    env = mesh_env.env
    a, b = register(meshctl, env, "migrating the db"), register(meshctl, env, "waiter")
    assert meshctl("claim", "--session", a, "res:db", env=env).code == 0
    screen = on_terminal(tmux, env, "claim", "--session", b, "res:db", "--wait", "60")

    wait_for(lambda: "s left" in screen(), what=screen)
    assert f"waiting for res:db; {a} holds res:db" in screen()
    assert "migrating the db" in screen()
    assert meshctl("release", "--session", a, "res:db", env=env).code == 0

    wait_for(lambda: "granted res:db" in screen(), what=screen)
    assert "s left" not in screen()


def on_terminal(
    tmux: Any, env: dict[str, str], *args: str, columns: int = 220
) -> Callable[[], str]:
    """Run ``meshctl ARGS`` with the mesh's environment on a tmux terminal (left idling
    afterwards, so the pane stays to be read); the function that reads its screen."""
    line = " ".join(
        [f"{k}={v!r}" for k, v in env.items() if k.startswith(("MESH_", "XDG_"))]
        + [sys.executable, "-m", "meshctl.cli", *args, ";", "echo", "ENDED", ";", "sleep", "600"]
    )
    tmux("new-session", "-d", "-x", str(columns), "-y", "24", f"env {line}")
    return lambda: str(tmux("capture-pane", "-p"))


def rows(screen: str) -> list[str]:
    return [row for row in screen.splitlines() if row.strip()]


class TestWidth:
    def test_one_line_at_80_columns_then_only_the_outcome(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any, tmux: Any
    ) -> None:
        """A holder with a long task: the line is cut to 80 columns and redrawn in
        place (no row of junk per redraw), the time left stays in view, and when the
        wait runs out the outcome is all that is left on the screen."""
        env = mesh_env.env
        a = register(meshctl, env, "migrating the production database " * 5)
        b = register(meshctl, env, "waiter")
        assert meshctl("claim", "--session", a, "res:db", env=env).code == 0
        screen = on_terminal(
            tmux, env, "claim", "--session", b, "res:db", "--wait", "4", columns=80
        )

        # any second of the countdown: a loaded machine's screen reads may be seconds apart
        wait_for(lambda: " s left" in screen(), what=screen)
        shown = rows(screen())
        assert len(shown) == 1, shown
        assert len(shown[0]) < 80, shown
        assert shown[0].endswith(" s left"), shown
        assert shown[0].startswith(f"meshctl: waiting for res:db; {a} holds res:db"), shown

        wait_for(lambda: "ENDED" in screen(), what=screen)
        left = rows(screen())
        assert left[-1] == "ENDED"
        assert not any("s left" in row for row in left), left
        assert "the wait ran out after 4 s" in " ".join(left), left


class TestPure:
    def test_fit_keeps_the_clock_and_cuts_the_middle(self) -> None:
        head = "meshctl: waiting for res:db; a holds res:db since 14:02 — " + "x" * 100

        line = _waiting.fit(head, "3 s left", 80)

        assert _terminal.width(line) == 79
        assert line.endswith("… — 3 s left")
        assert _waiting.fit("meshctl: waiting", "3 s left", 80) == (
            "meshctl: waiting — 3 s left (Ctrl-C to stop)"
        )
        assert _terminal.width(_waiting.fit(head, "3 s left", 5)) <= 4

    def test_wide_characters_count_two_cells(self) -> None:
        assert _terminal.width("日本語") == 6
        assert _terminal.cut("日本語テキスト", 7) == "日本語…"
        assert _terminal.width(_terminal.cut("日本語テキスト", 7)) == 7

    def test_describe_wait_names_the_holder_and_the_queue(self) -> None:
        holders = [{"session_id": "a", "resource": "res:db", "reason": "migrating"}]
        waiters = [
            {"session_id": "w1", "resources": ["res:db"]},
            {"session_id": "w2", "resources": ["res:other"]},
            {"session_id": "w3", "resources": ["file:/p"]},
            {"session_id": "me", "resources": ["res:db", "file:/p/x"]},
            {"session_id": "late", "resources": ["res:db"]},
        ]

        text = describe_wait(holders, waiters, "me", ["res:db", "file:/p/x"])

        assert text == "a holds res:db — migrating; 2 ahead in the queue"

    def test_describe_wait_before_queueing_and_when_free(self) -> None:
        holders = [
            {"session_id": "a", "resource": "res:db"},
            {"session_id": "b", "resource": "res:db"},
        ]

        assert describe_wait(holders, [], "me", ["res:db"]) == (
            "a holds res:db (+1 more); next in the queue"
        )
        assert describe_wait([], [], "me", ["res:db"]) == "free now"


class TestNotATerminal:
    def test_run_wait_says_it_ran_out_and_draws_nothing(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any
    ) -> None:
        env = mesh_env.env
        a = register(meshctl, env, "holder")
        assert meshctl("claim", "--session", a, "res:db", env=env).code == 0

        r = meshctl("run", "--res", "res:db", "--wait", "0.3", "--", "true", env=env)

        assert r.code == 75, r
        assert "the wait ran out after 0.3 s; still held" in r.err
        assert "s left" not in r.err
        assert "\x1b[" not in r.err

    def test_signal_wait_says_it_ran_out(self, meshctl: Meshctl, daemon: Any) -> None:
        r = meshctl("signal", "wait", "never", "--timeout", "0.3", env=daemon.env)

        assert r.code == 75, r
        assert "the wait ran out after 0.3 s; no signal never came (last seq 0)" in r.err
        assert "s left" not in r.err

    def test_job_wait_says_it_ran_out(self, meshctl: Meshctl, mesh_env: Any, daemon: Any) -> None:
        """The job runs until the test lets it end (a fixed ``sleep`` may be over before
        the short wait asks, on a loaded machine)."""
        env = mesh_env.env
        go = mesh_env.root / "go"
        mesh_env.write_config('[jobs.slow]\nresources = ["res:slow"]\n')
        assert meshctl("daemon", "reload", env=env).code == 0
        sleeper = subprocess.Popen(
            [sys.executable, "-m", "meshctl.cli", "job", "run", "slow", "--",
             "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        with reaped(sleeper):
            try:
                wait_for(
                    lambda: meshctl("jobs", "--json", env=env).json()["jobs"][0].get("running")
                )

                r = meshctl("job", "wait", "slow", "--timeout", "0.3", env=env)
            finally:
                go.touch()
            sleeper.wait(60)

        assert r.code == 75, r
        assert "the wait ran out after 0.3 s; job slow is still running" in r.err
        assert r.out == ""
        assert "s left" not in r.err


class TestTerminal:
    def test_run_wait_shows_holder_and_queue_position(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any, tmux: Any
    ) -> None:
        """A second waiter ahead is counted; the line goes once the run gets its turn."""
        env = mesh_env.env
        a = register(meshctl, env, "migrating the db")
        b = register(meshctl, env, "first in line")
        assert meshctl("claim", "--session", a, "res:db", env=env).code == 0
        first = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "meshctl.cli",
                "claim",
                "--session",
                b,
                "res:db",
                "--wait",
                "60",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(lambda: meshctl("call", "claim.list", env=env).json()["waiting"])
            screen = on_terminal(
                tmux, env, "run", "--res", "res:db", "--wait", "60", "--", "echo", "RAN"
            )
            wait_for(lambda: "1 ahead in the queue" in screen(), what=screen)
            assert f"waiting for res:db; {a} holds res:db" in screen()
            assert "s left" in screen()

            assert meshctl("release", "--session", a, "res:db", env=env).code == 0
            first.wait(30)
            assert meshctl("release", "--session", b, "res:db", env=env).code == 0
            wait_for(lambda: "RAN" in screen(), what=screen)
            assert "s left" not in screen()
        finally:
            first.kill()
            first.wait(10)

    def test_signal_wait_without_a_limit_counts_up(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any, tmux: Any
    ) -> None:
        env = mesh_env.env
        screen = on_terminal(tmux, env, "signal", "wait", "go")
        wait_for(lambda: "waiting for signal go" in screen(), what=screen)
        assert "s so far" in screen()
        assert meshctl("signal", "emit", "go", env=env).code == 0

        wait_for(lambda: "go #1 from" in screen(), what=screen)
        assert "s so far" not in screen()
