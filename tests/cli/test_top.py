"""``meshctl top``: the live view, fed by the daemon's ``mesh.changed`` events.

Driven for real: ``--once`` and the plain (not a terminal) mode through pipes, and
the full-screen mode inside tmux (send-keys, capture-pane).
"""

from __future__ import annotations

import subprocess
import sys
import time
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
            seen = []
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                seen.append(line)
                if sid in line:
                    break
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
        wait_for(lambda: tmux("list-sessions") == "", timeout=10)
