"""``--wait`` of ``claim``, ``run`` and ``resume`` past the daemon's ``max_query_timeout``.

SPEC §2: a wire wait longer than ``max_query_timeout`` is capped to it, never refused;
the command line passes what was asked (it refused more than 3600 s as a usage error),
says the cap when the wait ran out at it, and counts down from the cap on a terminal.
"""

from __future__ import annotations

from typing import Any

from tests.cli.conftest import Meshctl
from tests.cli.test_waiting import on_terminal, register
from tests.support import wait_for

CAPPED = "[defaults]\nmax_query_timeout = 1\n"


def held(meshctl: Meshctl, mesh_env: Any) -> tuple[dict[str, str], str]:
    """A daemon capping waits at 1 s, res:db held by one session; a second session."""
    env = mesh_env.env
    mesh_env.write_config(CAPPED)
    assert meshctl("daemon", "reload", env=env).code == 0
    a, b = register(meshctl, env, "holder"), register(meshctl, env, "waiter")
    assert meshctl("claim", "--session", a, "res:db", env=env).code == 0
    return env, b


def test_claim_wait_past_the_cap_is_capped_and_said(
    meshctl: Meshctl, daemon: Any, mesh_env: Any
) -> None:
    env, b = held(meshctl, mesh_env)

    r = meshctl("claim", "--session", b, "res:db", "--wait", "7200", env=env)
    j = meshctl("claim", "--session", b, "res:db", "--wait", "7200", "--json", env=env)

    assert r.code == 75, r
    assert (
        "the wait ran out after 1 s, the longest one wait runs here "
        "(max_query_timeout; 7200 s were asked); still held"
    ) in r.err
    assert j.code == 75, j
    assert j.json()["status"] == "held"


def test_run_wait_past_the_cap(meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
    env, b = held(meshctl, mesh_env)

    r = meshctl("run", "--session", b, "--res", "res:db", "--wait", "5000", "--", "true", env=env)

    assert r.code == 75, r
    assert "the wait ran out after 1 s, the longest one wait runs here" in r.err


def test_a_wait_under_the_cap_says_no_cap(meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
    env, b = held(meshctl, mesh_env)

    r = meshctl("claim", "--session", b, "res:db", "--wait", "0.3", env=env)

    assert r.code == 75, r
    assert "the wait ran out after 0.3 s; still held" in r.err


def test_the_terminal_counts_down_from_the_cap(
    meshctl: Meshctl, daemon: Any, mesh_env: Any, tmux: Any
) -> None:
    env = mesh_env.env
    mesh_env.write_config("[defaults]\nmax_query_timeout = 30\n")
    assert meshctl("daemon", "reload", env=env).code == 0
    a, b = register(meshctl, env, "holder"), register(meshctl, env, "waiter")
    assert meshctl("claim", "--session", a, "res:db", env=env).code == 0

    screen = on_terminal(tmux, env, "claim", "--session", b, "res:db", "--wait", "7200")

    wait_for(lambda: "s left" in screen(), what=screen)
    left = int(screen().split(" s left")[0].rsplit(" ", 1)[1])
    assert left <= 30, screen()
    assert meshctl("release", "--session", a, "res:db", env=env).code == 0
    wait_for(lambda: "granted res:db" in screen(), what=screen)
