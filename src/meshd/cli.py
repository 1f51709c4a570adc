"""``meshd run [--profile P] [--log-level L]``: the daemon's entry point and its one parser.

Why a parser of its own: every auto-start from ``meshctl`` and every ``systemctl
start`` runs this module, and BENCH.md holds daemon start to first answer within 2x
the floor D (a minimal anyio server). Importing click (or argparse, which pulls in
gettext and shutil) is milliseconds of a start that has none to spare
(docs/bench-runs/2026-12-01-notebook.md, "Daemon start-up"); the command line has
two options.

It reads a command line as click did when it was click's, and says the same: the
options take ``--opt VALUE`` or ``--opt=VALUE`` (the value may start with a dash),
the last one wins, ``MESH_PROFILE`` (when not empty) stands in for ``--profile``,
``--log-level`` takes its choices in any case, ``--help`` and ``--version`` win over
an invalid value, and a usage error is exit 2 with the usage line, a hint and
"Error: …" on stderr. ``tests/test_meshd_cli.py`` holds each message.
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
"""``--log-level``'s choices (taken in any case)."""
_VALUED = {"--profile": "profile", "--log-level": "log_level"}

_GROUP_USAGE = "Usage: {prog} [OPTIONS] COMMAND [ARGS]...\n"
_GROUP_HELP = """
  Session Mesh daemon.

Options:
  --version  Show the version and exit.
  --help     Show this message and exit.

Commands:
  run  Serve PROFILE in the foreground until SIGTERM or SIGINT.
"""
_RUN_USAGE = "Usage: {prog} run [OPTIONS]\n"
_RUN_HELP = """
  Serve PROFILE in the foreground until SIGTERM or SIGINT.

Options:
  --profile TEXT                  Profile to serve.  [env var: MESH_PROFILE;
                                  default: default]
  --log-level [debug|info|warning|error]
                                  [default: info]
  --help                          Show this message and exit.
"""


class Exit(Exception):
    """The command line ends here: print ``out`` and ``err``, exit with ``code``."""

    def __init__(self, code: int, out: str = "", err: str = "") -> None:
        super().__init__(code)
        self.code, self.out, self.err = code, out, err


class _Usage(Exception):
    """A usage error; the caller adds the usage line and the hint."""


def _no_such_option(name: str, known: tuple[str, ...]) -> _Usage:
    """Say "No such option", with click's suggestion of the closest known names."""
    import difflib  # only for a mistyped option

    if not name.startswith("--"):
        name = name[:2]  # a short option: click reads "-profile" as "-p" "-r" …
    close = difflib.get_close_matches(name, known)
    hint = ""
    if len(close) == 1:
        hint = f" Did you mean {close[0]!r}?"
    elif close:
        hint = f" (Possible options: {', '.join(close)})"
    return _Usage(f"No such option {name!r}.{hint}")


def _read(
    args: list[str], valued: dict[str, str], flags: tuple[str, ...], interspersed: bool
) -> tuple[dict[str, str], list[str], list[str]]:
    """(values, flags in the order given, positionals) of ``args``, as click reads them.

    A group (``interspersed`` false) stops at its first positional, the command's
    name, and hands the rest on untouched."""
    values: dict[str, str] = {}
    seen: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg, i = args[i], i + 1
        if arg == "--":
            return values, seen, rest + args[i:]
        if not arg.startswith("-") or arg == "-":
            rest.append(arg)
            if not interspersed:
                return values, seen, rest + args[i:]
            continue
        name, eq, value = arg.partition("=")
        if name in flags:
            if eq:
                raise Exit(2, err=f"Error: Option {name!r} does not take a value.\n")
            seen.append(name)
        elif name in valued:
            if not eq:
                if i >= len(args):
                    raise Exit(2, err=f"Error: Option {name!r} requires an argument.\n")
                value, i = args[i], i + 1
            values[valued[name]] = value  # the last one wins
        else:
            raise _no_such_option(name, (*valued, *flags))
    return values, seen, rest


def _usage_error(usage: str, command_path: str, message: str) -> Exit:
    """Exit 2 with the usage line, the hint and the message, as click says a usage error."""
    return Exit(2, err=f"{usage}Try '{command_path} --help' for help.\n\nError: {message}\n")


def _run_options(args: list[str], prog: str, environ: Mapping[str, str]) -> dict[str, str]:
    """``run``'s keyword arguments for ``args`` (what follows ``run``)."""
    usage, path = _RUN_USAGE.format(prog=prog), f"{prog} run"
    try:
        given, asked, extra = _read(args, _VALUED, ("--help",), interspersed=True)
    except _Usage as exc:
        raise _usage_error(usage, path, str(exc)) from None
    if asked:
        raise Exit(0, out=usage + _RUN_HELP)
    values = {"profile": environ.get("MESH_PROFILE") or "default", "log_level": "info"}
    values.update(given)
    level = values["log_level"]
    if level.lower() not in LEVELS:
        choices = ", ".join(repr(c) for c in LEVELS)
        message = f"Invalid value for '--log-level': {level!r} is not one of {choices}."
        raise _usage_error(usage, path, message)
    if extra:
        s = "s" if len(extra) > 1 else ""
        raise _usage_error(usage, path, f"Got unexpected extra argument{s} ({' '.join(extra)})")
    return {**values, "log_level": level.lower()}


def parse(argv: list[str], environ: Mapping[str, str], prog: str = "meshd") -> dict[str, str]:
    """``run``'s keyword arguments for ``argv`` (after the program name); raises
    :class:`Exit` for help, ``--version`` and usage errors."""
    usage = _GROUP_USAGE.format(prog=prog)
    if not argv:
        raise Exit(2, err=usage + _GROUP_HELP)
    try:
        _, asked, rest = _read(argv, {}, ("--version", "--help"), interspersed=False)
    except _Usage as exc:
        raise _usage_error(usage, prog, str(exc)) from None
    if asked and asked[0] == "--version":
        from meshd import __version__

        raise Exit(0, out=f"meshd, version {__version__}\n")
    if asked:
        raise Exit(0, out=usage + _GROUP_HELP)
    if not rest:
        raise _usage_error(usage, prog, "Missing command.")
    if rest[0] != "run":
        import difflib  # only for a mistyped command

        hint = " Did you mean 'run'?" if difflib.get_close_matches(rest[0], ["run"]) else ""
        raise _usage_error(usage, prog, f"No such command {rest[0]!r}.{hint}")
    return _run_options(rest[1:], prog, environ)


def program_name() -> str:
    """How the user ran us, for the usage line: ``meshd`` or ``python -m meshd``."""
    main = sys.modules.get("__main__")
    if getattr(main, "__package__", None):
        return "python -m meshd"
    return os.path.basename(sys.argv[0]) or "meshd"


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
        _say(f"meshd: {exc}\n")
        sys.exit(1)
    sys.exit(code)


def _say(text: str) -> None:
    """Write ``text`` to stderr, its ANSI escapes stripped unless stderr is a terminal."""
    if not sys.stderr.isatty():
        import re  # for a refusal only

        text = re.sub(r"\033\[[;?0-9]*[a-zA-Z]", "", text)
    sys.stderr.write(text)
    sys.stderr.flush()


def main() -> None:
    """The ``meshd`` command (console script and ``python -m meshd``)."""
    try:
        kwargs = parse(sys.argv[1:], os.environ, program_name())
    except Exit as done:
        sys.stdout.write(done.out)
        _say(done.err)
        sys.exit(done.code)
    try:
        serve(**kwargs)
    except (EOFError, KeyboardInterrupt):  # before the loop runs: "Aborted!", as click said
        sys.stderr.write("\nAborted!\n")
        sys.exit(1)
