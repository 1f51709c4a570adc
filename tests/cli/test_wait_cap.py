"""``--wait`` of ``claim``, ``run`` and ``resume`` past the daemon's ``max_query_timeout``.

SPEC §2: a wire wait longer than ``max_query_timeout`` is capped to it, never refused;
the command line passes what was asked (it refused more than 3600 s as a usage error),
says the cap when the wait ran out at it, and counts down from the cap on a terminal.
So do the asks (``sessions ask``, ``handoff request``, ``broadcast --collect``), whose
``--timeout`` the daemon caps the same way.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from tests.cli.conftest import Meshctl
from tests.cli.test_waiting import on_terminal, register
from tests.support import wait_for

CAPPED = "[defaults]\nmax_query_timeout = 1\n"


def capped_note(err: str, tail: str) -> float:
    """The seconds a note "the wait ran out after N s, the longest one wait runs here
    (max_query_timeout; …) TAIL" says: the time the daemon waited, the 1 s cap or a
    little past it on a loaded machine, never the wait that was asked."""
    m = re.search(
        r"the wait ran out after ([\d.]+) s, the longest one wait runs here "
        r"\(max_query_timeout; " + re.escape(tail), err,
    )  # fmt: skip
    assert m is not None, err
    took = float(m.group(1))
    assert 1 <= took < 60, err
    return took


@contextlib.contextmanager
def silent_responder(env: dict[str, str], session: str) -> Iterator[None]:
    """``inbox --follow --respond`` for ``session``: a live responder that never answers
    (its questions wait until the asker's timeout), killed when the block ends."""
    responder = subprocess.Popen(
        [sys.executable, "-m", "meshctl.cli", "inbox", "--follow", "--respond", "--session",
         session],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert responder.stderr is not None
        assert "following the inbox" in responder.stderr.readline()
        yield
    finally:
        responder.kill()
        responder.communicate(timeout=10)


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
    capped_note(r.err, "7200 s were asked); still held")
    assert j.code == 75, j
    assert j.json()["status"] == "held"


def test_run_wait_past_the_cap(meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
    env, b = held(meshctl, mesh_env)

    r = meshctl("run", "--session", b, "--res", "res:db", "--wait", "5000", "--", "true", env=env)

    assert r.code == 75, r
    capped_note(r.err, "5000 s were asked)")


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


@pytest.mark.parametrize(
    "command",
    [
        ("sessions", "ask", "{to}", "are you done?"),
        ("handoff", "request", "{to}"),
        ("broadcast", "who uses res:db?", "--collect"),
    ],
    ids=["sessions-ask", "handoff-request", "broadcast-collect"],
)
def test_asks_count_down_from_the_cap(
    meshctl: Meshctl, daemon: Any, mesh_env: Any, tmux: Any, command: tuple[str, ...]
) -> None:
    """An ask, a handoff request and a collected broadcast wait at most the daemon's
    ``max_query_timeout`` for a live responder that does not answer: the countdown
    starts at the cap, not at the 7200 s asked."""
    env = mesh_env.env
    mesh_env.write_config("[defaults]\nmax_query_timeout = 30\n")
    assert meshctl("daemon", "reload", env=env).code == 0
    me, busy = register(meshctl, env, "asker"), register(meshctl, env, "busy")
    with silent_responder(env, busy):
        args = [a.format(to=busy) for a in command]
        screen = on_terminal(tmux, env, *args, "--timeout", "7200", "--session", me)

        wait_for(lambda: "s left" in screen(), what=screen)
        left = int(screen().split(" s left")[0].rsplit(" ", 1)[1])

    assert 0 < left <= 30, screen()


def test_asks_that_ran_out_at_the_cap_say_so(meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
    """A handoff request and a collected broadcast that ran out at ``max_query_timeout``
    say they ran out after the cap, not after the 7200 s asked."""
    env = mesh_env.env
    mesh_env.write_config(CAPPED)
    assert meshctl("daemon", "reload", env=env).code == 0
    me, busy = register(meshctl, env, "asker"), register(meshctl, env, "busy")
    with silent_responder(env, busy):
        asked = meshctl("handoff", "request", busy, "--timeout", "7200", "--session", me, env=env)
        told = meshctl("broadcast", "who?", "--collect", "--timeout", "7200", "--session", me,
                       env=env)  # fmt: skip

    assert asked.code == 75, asked
    capped_note(asked.err, f"7200 s were asked); {busy} did not answer")
    assert told.code == 0, told
    capped_note(told.err, f"7200 s were asked); no live answer from {busy}")
