"""``meshctl top``: the live view, fed by the daemon's ``mesh.changed`` events.

Driven for real: ``--once`` and the plain (not a terminal) mode through pipes, and
the full-screen mode inside tmux (send-keys, capture-pane).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from tests.cli.conftest import Meshctl
from tests.support import wait_for


def register(meshctl: Meshctl, env: dict[str, str], task: str) -> str:
    r = meshctl("register", "--task", task, "--liveness", "heartbeat", env=env)
    assert r.code == 0, r
    return r.out.strip()


class TestOnce:
    def test_shows_sessions_and_claims_escaped(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any
    ) -> None:
        env = mesh_env.env
        sid = register(meshctl, env, "refactor auth\x1b]0;owned\x07")
        assert (
            meshctl("claim", "--session", sid, "res:deploy", "--reason", "ship it", env=env).code
            == 0
        )

        r = meshctl("top", "--once", env=env)

        assert r.code == 0, r
        assert sid in r.out
        assert "refactor auth\\x1b]0;owned\\x07" in r.out
        assert "\x1b" not in r.out
        assert "res:deploy" in r.out
        assert "ship it" in r.out

    def test_json_is_one_document(self, meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
        sid = register(meshctl, mesh_env.env, "a task")

        r = meshctl("top", "--json", env=mesh_env.env)

        assert r.code == 0, r
        assert [s["session_id"] for s in r.json()["sessions"]] == [sid]


class TestPlain:
    def test_prints_again_when_something_changes(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any
    ) -> None:
        """Not a terminal: one view at start, another when a session registers (pushed)."""
        env = mesh_env.env
        proc = subprocess.Popen(
            [sys.executable, "-m", "meshctl.cli", "top"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()
            assert first.startswith("meshctl top — profile test — 0 sessions")
            sid = register(meshctl, env, "appears live")
            seen: list[str] = []
            while not any(sid in line for line in seen):  # each read waits for a line
                line = proc.stdout.readline()
                assert line, (seen, proc.poll())
                seen.append(line)
            assert any(sid in line and "appears live" in line for line in seen), seen
        finally:
            proc.kill()
            proc.communicate(timeout=10)


class TestFullScreen:
    def test_in_tmux_live_filter_open_quit(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any, tmux: Any
    ) -> None:
        env = {**mesh_env.env, "TERM": "xterm-256color"}
        first = register(meshctl, env, "refactor auth")
        cmd = " ".join(
            [f"{k}={v!r}" for k, v in env.items() if k.startswith(("MESH_", "XDG_"))]
            + [sys.executable, "-m", "meshctl.cli", "top"]
        )
        tmux("new-session", "-d", "-x", "150", "-y", "40", f"env TERM=xterm-256color {cmd}")

        def screen() -> str:
            return str(tmux("capture-pane", "-p"))

        wait_for(lambda: first in screen(), what=screen)
        second = register(meshctl, env, "nightly import")
        wait_for(lambda: second in screen(), what=screen)  # pushed, not polled

        tmux("send-keys", "/", "nightly", "Enter")
        wait_for(lambda: "filter: nightly" in screen(), what=screen)
        assert first not in screen()
        tmux("send-keys", "Enter")  # open the selected session
        wait_for(lambda: "nightly import" in screen() and "Esc: back" in screen())
        tmux("send-keys", "Escape")
        wait_for(lambda: "Esc: back" not in screen(), what=screen)
        tmux("send-keys", "q")
        wait_for(lambda: tmux("list-sessions") == "")


def top_on_terminal(tmux: Any, env: dict[str, str], columns: int) -> Any:
    """``meshctl top`` full screen in a tmux pane ``columns`` wide; its screen reader."""
    cmd = " ".join(
        [f"{k}={v!r}" for k, v in env.items() if k.startswith(("MESH_", "XDG_"))]
        + [sys.executable, "-m", "meshctl.cli", "top"]
    )
    tmux("new-session", "-d", "-x", str(columns), "-y", "30", f"env TERM=xterm-256color {cmd}")
    return lambda: str(tmux("capture-pane", "-p"))


class TestHandoffs:
    def test_the_newest_five_newest_last(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any
    ) -> None:
        env = mesh_env.env
        sid = register(meshctl, env, "writer")
        for n in range(8):
            r = meshctl("handoff", "write", f"handoff number {n}", "--session", sid, env=env)
            assert r.code == 0, r

        out = meshctl("top", "--once", env=env).out

        section = out.split("HANDOFFS (newest last)\n", 1)[1].split("\n\n", 1)[0]
        shown = [line.rsplit("handoff number ", 1)[1] for line in section.splitlines()]
        assert shown == ["3", "4", "5", "6", "7"], out


class TestDaemonRestart:
    def test_plain_reconnects_and_says_so(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any, short_tmp: Any
    ) -> None:
        """Not a terminal: a restart is told on stderr, then top goes on with the
        restored daemon (rc 0 and silence before)."""
        env = mesh_env.env
        err = (short_tmp / "top.err").open("w+")
        proc = subprocess.Popen(
            [sys.executable, "-m", "meshctl.cli", "top"],
            env=env, stdout=subprocess.PIPE, stderr=err, text=True,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith("meshctl top — profile test")
            daemon.restart()
            sid = register(meshctl, env, "after the restart")
            seen: list[str] = []
            while not any(sid in line for line in seen):
                line = proc.stdout.readline()
                assert line, (seen, proc.poll(), (short_tmp / "top.err").read_text())
                seen.append(line)
            told = (short_tmp / "top.err").read_text()
            assert "meshctl: lost the daemon (" in told
            assert "reconnecting (Ctrl-C stops)" in told
            assert "meshctl: reconnected to the daemon" in told
            assert proc.poll() is None
        finally:
            proc.kill()
            proc.communicate(timeout=10)
            err.close()

    def test_full_screen_reconnects_and_says_so(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any, tmux: Any
    ) -> None:
        env = mesh_env.env
        screen = top_on_terminal(tmux, env, 100)
        wait_for(lambda: "meshctl top — profile test" in screen(), what=screen)

        daemon.restart()
        sid = register(meshctl, env, "after the restart")

        wait_for(lambda: sid in screen(), what=screen)
        assert "reconnected to the daemon at " in screen()
        assert tmux("list-sessions") != ""


class TestTerminal80:
    def test_stale_mark_stays_in_80_columns(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any, tmux: Any
    ) -> None:
        env = mesh_env.env
        mesh_env.write_config("[defaults]\nstale_after = 0.5\n")
        assert meshctl("daemon", "reload", env=env).code == 0
        sid = register(meshctl, env, "a long task that fills the line " * 4)
        screen = top_on_terminal(tmux, env, 80)

        wait_for(lambda: "(1 stale)" in screen(), what=screen)
        row = next(line for line in screen().splitlines() if sid in line)
        assert row.rstrip().endswith("…  [stale]"), screen()
        assert len(row) <= 80

    def test_clock_moves_without_changes(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any, tmux: Any
    ) -> None:
        env = mesh_env.env
        screen = top_on_terminal(tmux, env, 80)
        wait_for(lambda: "meshctl top — profile test" in screen(), what=screen)
        first = screen().splitlines()[0]

        wait_for(lambda: screen().splitlines()[0] != first, what=screen)


class TestPipe:
    def test_top_head_exits(self, meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
        """``top | head -3``: top notices its reader left and exits, with nothing changing
        in the mesh (before, it lived until the next change)."""
        head = subprocess.run(
            f"{sys.executable} -m meshctl.cli top | head -3",
            shell=True, env=mesh_env.env, capture_output=True, text=True, timeout=30,
        )  # fmt: skip

        assert head.returncode == 0, head
        assert head.stdout.startswith("meshctl top — profile test")


def test_heading_counts_in_words() -> None:
    """One session and one claim are said in the singular ("1 sessions, 1 claims")."""
    from meshctl.cli._top import View, render

    one = View(
        profile="p",
        sessions=[{"session_id": "cli:a", "task": "t", "status": "idle"}],
        claims=[{"resource": "res:db", "session_id": "cli:a"}],
    )

    assert render(one)[0].startswith("meshctl top — profile p — 1 session, 1 claim, 0 waiting")
    assert render(View(profile="p"))[0].startswith(
        "meshctl top — profile p — 0 sessions, 0 claims, 0 waiting"
    )
