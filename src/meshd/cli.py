"""``meshd run [--profile P] [--log-level L]``: the daemon's entry point, click only when needed.

Why: every auto-start from ``meshctl`` and every ``systemctl start`` runs this
module, and BENCH.md holds daemon start to first answer within 2x the floor D (a
minimal anyio server). click is the daemon's CLI framework, but importing it is
several milliseconds of a start that has none to spare (docs/bench-runs/2026-12-01-notebook.md,
"Daemon start-up").

How: :func:`main` reads a plain ``run`` command line itself -- ``--profile`` and
``--log-level``, each as ``--opt VALUE`` or ``--opt=VALUE``, the last one winning,
``MESH_PROFILE`` when no ``--profile`` is given, as click reads them -- and runs
the same body as the click command (:func:`serve`). Anything else
(help, ``--version``, an unknown option, a missing or dash-led value, a log level
not in the list, a non-ASCII argument, completion) goes to :mod:`meshd.cli_click`,
so every usage message is still click's own. ``tests/test_meshd_cli.py`` compares
the two readings.
"""

from __future__ import annotations

import gc
import os
import sys

TYPE_CHECKING = False  # not typing's: the daemon's start-up does not need it yet
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import NoReturn

LEVELS = ("debug", "info", "warning", "error")
"""``--log-level``'s choices (the click option's, lower case; click takes any case)."""
_OPTIONS = {"--profile": "profile", "--log-level": "log_level"}


def parse(argv: list[str], environ: Mapping[str, str]) -> dict[str, str] | None:
    """``run``'s keyword arguments for ``argv`` (after the program name) as click
    would pass them, or None when the command line is left to click."""
    if not argv or argv[0] != "run" or "_MESHD_COMPLETE" in environ:
        return None
    values = {"profile": environ.get("MESH_PROFILE") or "default", "log_level": "info"}
    i = 1
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        key = _OPTIONS.get(name)
        if key is None or not argv[i].isascii():
            return None
        if not eq:
            if i + 1 >= len(argv) or argv[i + 1].startswith("-") or not argv[i + 1].isascii():
                return None
            value = argv[i + 1]
            i += 1
        i += 1
        values[key] = value
    level = values["log_level"].lower()
    if level not in LEVELS:
        return None
    values["log_level"] = level
    return values


def serve(profile: str, log_level: str) -> NoReturn:
    """``meshd run``'s body: serve ``profile`` until SIGTERM or SIGINT, then exit.

    Whatever can refuse the start -- and the socket -- comes first
    (:mod:`meshd.startup`), before the daemon's own modules load: a client that
    connects meanwhile waits for its answer instead of polling for the socket.
    The cyclic garbage collector is off until the daemon serves, when
    :meth:`meshd.app.Daemon.run` freezes what start-up made and turns it back on.
    """
    gc.disable()
    from meshd import startup

    try:
        begun = startup.Begun(profile)
        try:
            from meshd import app

            app.setup_logging(log_level)
        except BaseException:  # a broken install, an interrupt: no socket left behind
            begun.listening.discard(begun.paths)
            raise
        code = app.run(begun)
    except startup.StartupError as exc:
        import click  # for a refusal only: its echo (ANSI codes stripped off a terminal)

        click.echo(f"meshd: {exc}", err=True)
        sys.exit(1)
    sys.exit(code)


def main() -> None:
    """The ``meshd`` command (console script and ``python -m meshd``)."""
    kwargs = parse(sys.argv[1:], os.environ)
    if kwargs is None:
        from meshd.cli_click import main as click_main

        click_main()
        return
    try:
        serve(**kwargs)
    except (EOFError, KeyboardInterrupt):  # before the loop runs: as click's main says it
        sys.stderr.write("\nAborted!\n")
        sys.exit(1)
