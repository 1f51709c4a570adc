"""Colour for people on a terminal, none in pipes; NO_COLOR and --color honoured.

Run on a real pseudo-terminal (Python's ``pty``: the child's stdout and stderr are the
terminal, as in a person's shell) and through pipes."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from typing import Any

from tests.cli.conftest import Meshctl

RED, GREEN, YELLOW, RESET = "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[0m"


def on_pty(env: dict[str, str], *args: str) -> tuple[int, str]:
    """``meshctl ARGS`` with a pty as stdin, stdout and stderr: (exit code, all it wrote)."""
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "meshctl.cli", *args], env=env,
                            stdin=child, stdout=child, stderr=child)  # fmt: skip
    os.close(child)
    out = b""
    while True:
        ready, _, _ = select.select([main], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the child side closed
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    return proc.wait(30), out.decode(errors="replace")


def held_setup(meshctl: Meshctl, env: dict[str, str]) -> str:
    r = meshctl("register", "--task", "holder", "--liveness", "heartbeat", env=env)
    holder = r.out.strip()
    assert meshctl("claim", "res:db", "--session", holder, env=env).code == 0
    return holder


def test_held_is_red_and_free_green_on_a_terminal(
    meshctl: Meshctl, daemon: Any, mesh_env: Any
) -> None:
    env = {k: v for k, v in mesh_env.env.items() if k != "NO_COLOR"}
    env["TERM"] = "xterm-256color"
    holder = held_setup(meshctl, env)

    code, held = on_pty(env, "check", "res:db")
    _, free = on_pty(env, "check", "res:other")

    assert code == 75
    assert f"{RED}held:{RESET} {holder} holds res:db" in held
    assert f"{GREEN}free:{RESET} no other session" in free


def test_errors_are_red_on_a_terminal(meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
    env = {k: v for k, v in mesh_env.env.items() if k != "NO_COLOR"}
    env["TERM"] = "xterm-256color"

    code, out = on_pty(env, "sessions", "show", "nosuch")

    assert code == 1
    assert f"{RED}meshctl: no session nosuch in profile test{RESET}" in out


def test_none_with_no_color_never_or_in_a_pipe(
    meshctl: Meshctl, daemon: Any, mesh_env: Any
) -> None:
    env = {k: v for k, v in mesh_env.env.items() if k != "NO_COLOR"}
    env["TERM"] = "xterm-256color"
    held_setup(meshctl, env)

    _, no_color = on_pty({**env, "NO_COLOR": "1"}, "check", "res:db")
    _, never = on_pty(env, "check", "res:db", "--color", "never")
    piped = meshctl("check", "res:db", env=env)
    always = meshctl("--color", "always", "check", "res:db", env=env)

    assert "held:" in no_color
    assert "\x1b[" not in no_color
    assert "\x1b[" not in never
    assert "\x1b[" not in piped.out + piped.err
    assert always.out.startswith(f"{RED}held:{RESET} ")
