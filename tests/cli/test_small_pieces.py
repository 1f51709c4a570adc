"""Small pieces a person reaches for: a body from stdin (``send ID -``, ``notes add -``)
and a board path ending in ``/`` read as a folder before it exists (SPEC §7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.cli.conftest import Meshctl


def register(meshctl: Meshctl, env: dict[str, str]) -> str:
    r = meshctl("register", "--task", "t", "--liveness", "heartbeat", env=env)
    assert r.code == 0, r
    return r.out.strip()


def test_send_dash_reads_stdin(meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
    env = mesh_env.env
    me, you = register(meshctl, env), register(meshctl, env)

    sent = meshctl("send", you, "-", "--session", me, env=env, input="line one\nline two\n")
    empty = meshctl("send", you, "-", "--session", me, env=env, input="")

    assert sent.code == 0, sent
    inbox = meshctl("inbox", "--session", you, "--json", env=env).json()
    assert [i["text"] for i in inbox] == ["line one\nline two"]
    assert empty.code == 2, empty
    assert "stdin was empty" in empty.err


def test_notes_add_dash_reads_stdin(meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
    env = mesh_env.env
    me = register(meshctl, env)

    added = meshctl("notes", "add", "-", "--session", me, env=env, input="API base is /v2\n")

    assert added.code == 0, added
    notes = meshctl("notes", "list", "--json", env=env).json()
    assert [n["text"] for n in notes] == ["API base is /v2"]


def test_a_board_path_ending_in_slash_is_a_folder(
    meshctl: Meshctl, daemon: Any, mesh_env: Any, short_tmp: Path
) -> None:
    env = mesh_env.env
    me = register(meshctl, env)
    future = short_tmp / "not-yet"

    r = meshctl("board", "changed", f"{future}/", "--session", me, "--json", env=env)

    assert r.code == 0, r
    assert r.json()["project"] == str(future)


def test_daemon_restart_names_the_new_pid_and_the_old(meshctl: Meshctl, offline_env: Any) -> None:
    """One pid is the daemon's: the old one is said as such ("meshd restarted (pid A):
    …, pid B" read as two daemons)."""
    env = offline_env.env
    try:
        first = meshctl("daemon", "restart", "--json", env=env)
        again = meshctl("daemon", "restart", env=env)
        now = meshctl("daemon", "status", "--json", env=env)
    finally:
        meshctl("daemon", "stop", env=env)

    assert first.code == 0, first
    old = first.json()["pid"]
    assert again.code == 0, again
    new = now.json()["pid"]
    assert again.out == (
        f"meshd restarted: profile default, pid {new} (was pid {old}), "
        f"socket {env['MESH_SOCKET']}\n"
    )
