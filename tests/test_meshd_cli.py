"""``meshd run`` reads a plain command line without click, exactly as click reads it.

:mod:`meshd.cli` (the entry point) takes ``run`` with ``--profile``/``--log-level``
itself and leaves everything else to the click tree (:mod:`meshd.cli_click`). For
each command line below, what the fast reading passes to the command body must be
what click passes; a line the fast reading refuses must be one click handles itself
(help, usage errors). And the daemon's own modules must not pull click back in.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import click
import pytest

from meshd import cli
from meshd.cli_click import main as click_main

from .conftest import MeshEnv


def click_reading(argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """What click passes to ``run`` for ``argv`` (or ``"usage"``/``"exit"`` when it refuses)."""
    monkeypatch.delenv("MESH_PROFILE", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    got: dict[str, Any] = {}
    run = click_main.commands["run"]
    monkeypatch.setattr(run, "callback", lambda **kw: got.update(kw))
    try:
        click_main.main(argv, prog_name="meshd", standalone_mode=False)
    except click.UsageError:
        return "usage"
    except click.exceptions.Exit:
        return "exit"
    return got or "exit"


CASES: list[tuple[list[str], dict[str, str]]] = [
    (["run"], {}),
    (["run"], {"MESH_PROFILE": "work"}),
    (["run"], {"MESH_PROFILE": ""}),  # empty: click's default
    (["run", "--profile", "a"], {"MESH_PROFILE": "work"}),
    (["run", "--profile=a"], {}),
    (["run", "--profile", "a", "--profile", "b"], {}),  # the last one wins
    (["run", "--log-level", "debug"], {}),
    (["run", "--log-level=WARNING", "--profile", "x.y-z_1"], {}),
    (["run", "--log-level", "Error"], {}),
    (["run", "--profile", "../etc"], {}),  # click passes it on; the daemon refuses it
    (["run", "--profile="], {}),
]
"""Command lines the fast reading takes: click must read them the same."""

REFUSED: list[list[str]] = [
    [],
    ["--help"],
    ["--version"],
    ["run", "--help"],
    ["run", "-h"],
    ["run", "--log-level", "loud"],
    ["run", "--log-level"],
    ["run", "--profile"],
    ["run", "--profile", "--log-level", "info"],
    ["run", "--prof", "a"],
    ["run", "extra"],
    ["run", "--", "x"],
    ["stop"],
    ["run", "--profile", "caf\u00e9"],
]
"""Command lines left to click (help, usage errors, what the fast reading does not know)."""


@pytest.mark.parametrize(("argv", "env"), CASES)
def test_fast_reading_is_clicks(
    argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = cli.parse(argv, env)

    assert fast is not None
    assert fast == click_reading(argv, env, monkeypatch)


@pytest.mark.parametrize("argv", REFUSED)
def test_other_lines_are_left_to_click(argv: list[str]) -> None:
    assert cli.parse(argv, {}) is None


def test_completion_is_left_to_click() -> None:
    assert cli.parse(["run"], {"_MESHD_COMPLETE": "bash_source"}) is None


def test_the_daemon_does_not_import_click() -> None:
    """The entry point and everything the daemon loads to serve stay click-free."""
    code = "import sys, meshd.cli, meshd.app\nprint('click' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )

    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--profile", "../etc"],  # refused by the daemon: the fast path
        ["run", "--log-level", "loud"],  # refused by click: its usage error
        ["--version"],
    ],
)
def test_both_ways_say_the_same(mesh_env: MeshEnv, argv: list[str]) -> None:
    """``python -m meshd`` (fast path first) and the click tree alone: same output and status."""

    def run(code: str) -> tuple[int, str, str]:
        done = subprocess.run(
            [sys.executable, "-c", code, *argv],
            env=mesh_env.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return done.returncode, done.stdout, done.stderr

    user = run("import sys; sys.argv[0] = 'meshd'; from meshd.cli import main; main()")
    clicks = run("from meshd.cli_click import main; main(prog_name='meshd')")

    assert user == clicks
    assert user[0] != 0 or argv == ["--version"]


_GC_PROBE = """
import gc, os, sys
from meshd import app, cli, sdnotify

open_store = app.Daemon.open_store
def probed(self):
    print("restoring with the collector", "on" if gc.isenabled() else "off", flush=True)
    open_store(self)
app.Daemon.open_store = probed
def notify(message):
    if message.startswith("READY=1"):
        print("serving with the collector", "on" if gc.isenabled() else "off", flush=True)
        print("frozen", gc.get_freeze_count() > 0, flush=True)
        os._exit(0)
sdnotify.notify = notify
sys.argv = ["meshd", "run", "--profile", "test"]
cli.main()
"""


def test_the_collector_is_off_until_the_daemon_serves(mesh_env: MeshEnv) -> None:
    """Start-up runs without the cyclic collector (its collections cost the first answer
    milliseconds); serving, the daemon has frozen what start-up made and turned it on."""
    out = subprocess.run(
        [sys.executable, "-c", _GC_PROBE],
        env=mesh_env.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert out.stdout.splitlines() == [
        "restoring with the collector off",
        "serving with the collector on",
        "frozen True",
    ], out.stderr
