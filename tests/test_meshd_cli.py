"""``meshd``'s one parser: what each command line runs, and what each refusal says.

:mod:`meshd.cli` reads ``meshd run [--profile P] [--log-level L]`` itself, without
click or argparse (start-up time). The readings and the messages below are the ones
click gave when the daemon's command line was click's; they are pinned here so the
parser keeps them. The daemon, and every command line, stay click-free.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from meshd import __version__, cli

from .conftest import MeshEnv

READINGS: list[tuple[list[str], dict[str, str], dict[str, str]]] = [
    (["run"], {}, {"profile": "default", "log_level": "info"}),
    (["run"], {"MESH_PROFILE": "work"}, {"profile": "work", "log_level": "info"}),
    (["run"], {"MESH_PROFILE": ""}, {"profile": "default", "log_level": "info"}),
    (["run", "--profile", "a"], {"MESH_PROFILE": "work"}, {"profile": "a", "log_level": "info"}),
    (["run", "--profile=a"], {}, {"profile": "a", "log_level": "info"}),
    (["run", "--profile", "a", "--profile", "b"], {}, {"profile": "b", "log_level": "info"}),
    (["run", "--log-level", "debug"], {}, {"profile": "default", "log_level": "debug"}),
    (
        ["run", "--log-level=WARNING", "--profile", "x.y-z_1"],
        {},
        {"profile": "x.y-z_1", "log_level": "warning"},
    ),
    (
        ["run", "--log-level", "nope", "--log-level", "Error"],
        {},
        {"profile": "default", "log_level": "error"},
    ),
    (
        ["run", "--profile", "../etc"],
        {},
        {"profile": "../etc", "log_level": "info"},
    ),  # refused later
    (["run", "--profile="], {}, {"profile": "", "log_level": "info"}),
    (["run", "--profile", "-x"], {}, {"profile": "-x", "log_level": "info"}),  # a dash-led value
    (["run", "--profile", "caf\u00e9"], {}, {"profile": "caf\u00e9", "log_level": "info"}),
    (["run", "--"], {}, {"profile": "default", "log_level": "info"}),
    (["--", "run"], {}, {"profile": "default", "log_level": "info"}),
]
"""Command lines that run the daemon, and the keyword arguments ``run`` gets."""

GROUP_HELP = """Usage: meshd [OPTIONS] COMMAND [ARGS]...

  Session Mesh daemon.

Options:
  --version  Show the version and exit.
  --help     Show this message and exit.

Commands:
  run  Serve PROFILE in the foreground until SIGTERM or SIGINT.
"""
RUN_HELP = """Usage: meshd run [OPTIONS]

  Serve PROFILE in the foreground until SIGTERM or SIGINT.

Options:
  --profile TEXT                  Profile to serve.  [env var: MESH_PROFILE;
                                  default: default]
  --log-level [debug|info|warning|error]
                                  [default: info]
  --help                          Show this message and exit.
"""
GROUP_TRY = "Usage: meshd [OPTIONS] COMMAND [ARGS]...\nTry 'meshd --help' for help.\n\nError: "
RUN_TRY = "Usage: meshd run [OPTIONS]\nTry 'meshd run --help' for help.\n\nError: "
LOUD = "'loud' is not one of 'debug', 'info', 'warning', 'error'."

EXITS: list[tuple[list[str], int, str, str]] = [
    ([], 2, "", GROUP_HELP),
    (["--help"], 0, GROUP_HELP, ""),
    (["--help", "--version"], 0, GROUP_HELP, ""),
    (["--help", "run"], 0, GROUP_HELP, ""),
    (["--version"], 0, f"meshd, version {__version__}\n", ""),
    (["--version", "--help"], 0, f"meshd, version {__version__}\n", ""),
    (["run", "--help"], 0, RUN_HELP, ""),
    (["run", "extra", "--help"], 0, RUN_HELP, ""),
    (["run", "--log-level", "loud", "--help"], 0, RUN_HELP, ""),
    (["-h"], 2, "", GROUP_TRY + "No such option '-h'.\n"),
    (["--ver"], 2, "", GROUP_TRY + "No such option '--ver'. Did you mean '--version'?\n"),
    (["--bogus", "run"], 2, "", GROUP_TRY + "No such option '--bogus'.\n"),
    (["--version=1"], 2, "", "Error: Option '--version' does not take a value.\n"),
    (["--"], 2, "", GROUP_TRY + "Missing command.\n"),
    (["stop"], 2, "", GROUP_TRY + "No such command 'stop'.\n"),
    (["Run"], 2, "", GROUP_TRY + "No such command 'Run'. Did you mean 'run'?\n"),
    (["run", "-h"], 2, "", RUN_TRY + "No such option '-h'.\n"),
    (["run", "-profile", "a"], 2, "", RUN_TRY + "No such option '-p'.\n"),
    (["run", "--version"], 2, "", RUN_TRY + "No such option '--version'.\n"),
    (
        ["run", "--prof", "a"],
        2,
        "",
        RUN_TRY + "No such option '--prof'. Did you mean '--profile'?\n",
    ),
    (
        ["run", "--log", "a"],
        2,
        "",
        RUN_TRY + "No such option '--log'. Did you mean '--log-level'?\n",
    ),
    (
        ["run", "--help", "--prof"],
        2,
        "",
        RUN_TRY + "No such option '--prof'. Did you mean '--profile'?\n",
    ),
    (["run", "--help=x"], 2, "", "Error: Option '--help' does not take a value.\n"),
    (["run", "--profile"], 2, "", "Error: Option '--profile' requires an argument.\n"),
    (["run", "--log-level"], 2, "", "Error: Option '--log-level' requires an argument.\n"),
    (["run", "--log-level", "loud"], 2, "", RUN_TRY + f"Invalid value for '--log-level': {LOUD}\n"),
    (
        ["run", "--log-level="],
        2,
        "",
        RUN_TRY + "Invalid value for '--log-level': '' is not one of 'debug', 'info', 'warning', "
        "'error'.\n",
    ),
    (["run", "extra"], 2, "", RUN_TRY + "Got unexpected extra argument (extra)\n"),
    (["run", "--", "x"], 2, "", RUN_TRY + "Got unexpected extra argument (x)\n"),
    (["run", "-"], 2, "", RUN_TRY + "Got unexpected extra argument (-)\n"),
    (
        ["run", "--profile", "a", "b", "c"],
        2,
        "",
        RUN_TRY + "Got unexpected extra arguments (b c)\n",
    ),
    (
        ["run", "--profile", "--log-level", "info"],
        2,
        "",
        RUN_TRY + "Got unexpected extra argument (info)\n",
    ),
]
"""Command lines that end before the daemon runs: (exit status, stdout, stderr)."""


@pytest.mark.parametrize(("argv", "env", "expected"), READINGS)
def test_a_run_line_is_read(argv: list[str], env: dict[str, str], expected: dict[str, str]) -> None:
    """What ``run`` gets: the last value wins, MESH_PROFILE when not empty, any case."""
    actual = cli.parse(argv, env)

    assert expected == actual


@pytest.mark.parametrize(("argv", "code", "out", "err"), EXITS)
def test_help_version_and_usage_errors_say_what_click_said(
    argv: list[str], code: int, out: str, err: str
) -> None:
    """Each ends with click's words and exit status (2 for a usage error)."""
    with pytest.raises(cli.Exit) as done:
        cli.parse(argv, {}, "meshd")

    assert (code, out, err) == (done.value.code, done.value.out, done.value.err)


PROBE = """
import sys
sys.argv[0] = "meshd"
from meshd import cli
try:
    cli.main()
finally:
    print("click" in sys.modules, "argparse" in sys.modules, file=sys.stderr)
"""


@pytest.mark.parametrize(
    "argv", [["--help"], ["run", "--help"], ["--version"], ["run", "--prof", "a"], ["stop"]]
)
def test_no_command_line_imports_a_parser_library(argv: list[str]) -> None:
    """Help, the version and usage errors come from meshd.cli alone: no click, no argparse."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert out.stderr.splitlines()[-1] == "False False"


def test_the_daemon_does_not_import_click() -> None:
    """The entry point and everything the daemon loads to serve stay click-free."""
    code = "import sys, meshd.cli, meshd.app\nprint('click' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )

    assert out.stdout.strip() == "False"


def test_python_dash_m_names_itself_so(mesh_env: MeshEnv) -> None:
    """Run as ``python -m meshd``, the usage line says so (as click's did)."""
    out = subprocess.run(
        [sys.executable, "-m", "meshd", "run", "--log-level", "loud"],
        env=mesh_env.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip

    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == (
        "Usage: python -m meshd run [OPTIONS]\nTry 'python -m meshd run --help' for help.\n\n"
        f"Error: Invalid value for '--log-level': {LOUD}\n"
    )


def test_a_refused_start_says_why_without_escapes(mesh_env: MeshEnv) -> None:
    """A start the daemon refuses: exit 1 and the reason on stderr, its ANSI escapes
    stripped off a terminal (here one a config key carried in)."""
    config = mesh_env.root / "config.toml"
    config.write_text('[defaults]\n"\\u001b[31mx" = 1\n')
    env = {**mesh_env.env, "MESH_CONFIG": str(config)}
    out = subprocess.run(
        [sys.executable, "-m", "meshd", "run", "--profile", "test"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip

    assert out.returncode == 1
    assert out.stderr.startswith(f"meshd: {config}: key `defaults.x`: unknown key"), out.stderr
    assert "\x1b" not in out.stderr


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
