"""What a command says, it says once and short: a timed-out ask, a steal, a broadcast
to many, a changed file many are told of, and a check that is free with others around."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.cli.conftest import Meshctl

from meshctl.cli._claims_body import render_check


def register(meshctl: Meshctl, env: dict[str, str], task: str = "t") -> str:
    r = meshctl("register", "--task", task, "--liveness", "heartbeat", env=env)
    assert r.code == 0, r
    return r.out.strip()


def test_a_timed_out_ask_is_said_once(meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
    env = mesh_env.env
    me, busy = register(meshctl, env), register(meshctl, env, "busy")
    responder = subprocess.Popen(
        [sys.executable, "-m", "meshctl.cli", "inbox", "--follow", "--respond", "--session", busy],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert responder.stderr is not None
        assert "following the inbox" in responder.stderr.readline()

        r = meshctl("sessions", "ask", busy, "are you done?", "--timeout", "0.5",
                    "--session", me, env=env)  # fmt: skip
    finally:
        responder.kill()
        responder.communicate(timeout=10)

    assert r.code == 75, r
    assert "timed out after" in r.out
    assert "did not answer" not in r.err, r


def test_a_steal_is_one_line(meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
    env = mesh_env.env
    holder, me = register(meshctl, env), register(meshctl, env)
    assert meshctl("claim", "res:db", "--session", holder, env=env).code == 0

    r = meshctl("steal", "res:db", "--reason", "stuck", "--session", me, env=env)

    assert r.code == 0, r
    lines = (r.out + r.err).splitlines()
    assert len(lines) == 1, r
    assert lines[0].startswith(f"stole res:db from {holder} (token ")


def test_a_broadcast_to_many_counts_them(meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
    env = mesh_env.env
    me = register(meshctl, env)
    others = [register(meshctl, env) for _ in range(8)]

    r = meshctl("broadcast", "deploy at 5", "--session", me, env=env)
    j = meshctl("broadcast", "deploy at 6", "--session", me, "--json", env=env)

    assert r.code == 0, r
    assert r.out.startswith("Sent to 8 sessions: ")
    assert r.out.endswith(" and 5 more (--json lists them).\n")
    assert sum(sid in r.out for sid in others) == 3
    assert sorted(j.json()["recipients"]) == sorted(others)


def test_a_changed_file_told_to_many_counts_them(
    meshctl: Meshctl, daemon: Any, mesh_env: Any, short_tmp: Path
) -> None:
    env = mesh_env.env
    me = register(meshctl, env)
    for _ in range(6):
        watcher = register(meshctl, env)
        assert meshctl("board", "watch", f"{short_tmp}/", "--session", watcher, env=env).code == 0

    r = meshctl("board", "changed", str(short_tmp / "a.py"), "--session", me, env=env)

    told = next(line for line in r.out.splitlines() if line.startswith("Told"))
    assert told.endswith(" and 3 more (--json lists them)."), r.out


def test_check_says_free_with_others_around(
    meshctl: Meshctl, daemon: Any, mesh_env: Any, short_tmp: Path
) -> None:
    env = mesh_env.env
    daemon.call("session.register", {"task": "editing", "cwd": str(short_tmp),
                                     "liveness": "heartbeat"})  # fmt: skip

    r = meshctl("check", str(short_tmp / "x.py"), env=env)

    assert r.code == 0, r
    first, *rest = r.out.splitlines()
    assert first == f"free: no other session claims {short_tmp}/x.py"
    assert rest
    assert rest[0].startswith("notice: ")


def test_render_check_free_then_notices() -> None:
    result = {"present": [{"session_id": "tui:2", "why": "cwd", "path": "/home/u/p"}]}

    text = render_check(["file:/home/u/p/x.py"], result, home="/home/u")

    assert text.splitlines() == [
        "free: no other session claims ~/p/x.py",
        "notice: tui:2 is working in ~/p",
    ]
