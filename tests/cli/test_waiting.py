"""A waiting command says what it waits for and the time left (on a terminal only),
and says plainly when the wait ran out (issue 15.6)."""

from __future__ import annotations

import sys
from typing import Any

from tests.cli.conftest import Meshctl
from tests.support import wait_for


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
    cmd = " ".join(
        [f"{k}={v!r}" for k, v in env.items() if k.startswith(("MESH_", "XDG_"))]
        + [sys.executable, "-m", "meshctl.cli", "claim", "--session", b, "res:db", "--wait", "60",
           ";", "sleep", "30"]
    )  # fmt: skip
    tmux("new-session", "-d", "-x", "200", "-y", "10", f"env {cmd}")

    def screen() -> str:
        return str(tmux("capture-pane", "-p"))

    wait_for(lambda: "s left" in screen(), what=screen)
    assert f"waiting for res:db; {a} holds res:db" in screen()
    assert "migrating the db" in screen()
    assert meshctl("release", "--session", a, "res:db", env=env).code == 0

    wait_for(lambda: "granted res:db" in screen(), what=screen)
    assert "s left" not in screen()
