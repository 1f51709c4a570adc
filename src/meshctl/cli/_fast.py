"""The hot commands without click: ``check``, ``claim``, ``release``, ``heartbeat``,
``sessions active``, and ``register`` and ``end`` around them.

Why: these are the calls agents and scripts make on every turn (and a script's
``register`` ... ``end`` around them), and BENCH.md holds each within 1.2x of S (a
stdlib script that sends one request) and within 0.8x of the peer session-coord's
same call. ``import click`` alone costs about 1.8x S, so a command that imports click
cannot get there; click stays the CLI's framework for everything else
(docs/PERFORMANCE.md; the passes in docs/bench-runs/2026-12-01-notebook.md, "CLI
start-up").

How: :func:`main` reads the command line with a parser that knows exactly these
commands' options. When it takes the command line, it builds the :class:`State`
click would build (command-line values over ``MESH_*`` variables over defaults, the
last occurrence winning), runs the *same* command body as the click command
(``_claims_body``, ``_lifecycle_body``, ``_sessions_body``), handles every failure
as the root group and click's ``main`` do, and exits. Any command line it does not
take -- help, ``--version``, completion, ``--``, an unknown option, a missing or
dash-led value, a value click would refuse (bad profile, relative socket, seconds
out of range, a status not in the list), undecodable bytes, ``MESHCTL_DEBUG`` --
makes it return without having done anything, and click runs it as always. So
every usage error is still click's own, word for word.

``tests/cli/test_fast_path.py`` runs every hot command both ways (this path and
click's, on the same daemon) and compares stdout, stderr and the exit code.

Standard library only; nothing here may import click (a test checks the modules a
hot command loads).
"""

from __future__ import annotations

import os
import sys

from meshctl._core import env as _env

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from typing import Any, NoReturn

    import click

    from meshctl.cli._state import State
    from meshd.protocol.errors import MeshError

#: ``--profile/--socket/--session`` (every level), the options of ``common_options``.
_COMMON = {"--profile": "profile", "--socket": "socket", "--session": "session"}
#: Their variables (an empty one counts as unset, as in click).
_ENV = {"profile": "MESH_PROFILE", "socket": "MESH_SOCKET", "session": "MESH_SESSION"}
#: The daemon's upper bound for durations (``meshctl.cli._params.ONE_YEAR``).
_ONE_YEAR = 31_536_000.0


class _Spec:
    """One hot command's options: flags, options with a value, and its arguments."""

    __slots__ = ("flags", "positional", "values")

    def __init__(self, flags: dict[str, str], values: dict[str, str], positional: str) -> None:
        self.flags = flags
        self.values = values
        #: "required" (one or more), "any" (zero or more) or "none"
        self.positional = positional


_SPECS: dict[str, _Spec] = {
    "check": _Spec({"--all-profiles": "all_profiles"}, {}, "required"),
    "claim": _Spec(
        {"--shared": "shared", "--broad": "broad"},
        {"--reason": "reason", "--ttl": "ttl", "--wait": "wait"},
        "required",
    ),
    "release": _Spec({}, {}, "any"),
    "heartbeat": _Spec({}, {"--status": "status", "--task": "task"}, "none"),
    "sessions active": _Spec(
        {"--all-profiles": "all_profiles", "--fresh": "fresh", "--local": "local"}, {}, "none"
    ),
    "register": _Spec(
        {"--no-queries": "no_queries", "--no-messages": "no_messages"},
        {
            "--task": "task",
            "--source": "source",
            "--pid": "pid",
            "--id": "session_id",
            "--liveness": "liveness",
            "--expire-after": "expire_after",
            "--parent": "parent",
            "--slot": "slot",
            "--status": "status",
        },
        "none",
    ),
    "end": _Spec({}, {"--handoff": "handoff"}, "none"),
}


class _Line:
    """A command line the fast path takes: the command, its options, the root options."""

    __slots__ = ("command", "json", "options", "positional", "settings")

    def __init__(self) -> None:
        self.command = ""
        self.json = False
        #: ``(name, value)`` of --profile/--socket/--session, in command-line order
        self.settings: list[tuple[str, str]] = []
        #: the command's own options (last occurrence wins)
        self.options: dict[str, Any] = {}
        self.positional: list[str] = []


def parse(argv: list[str]) -> _Line | None:
    """The command line, if the fast path takes it; None leaves it to click."""
    if not all(arg.isascii() for arg in argv):
        from meshctl.cli._state import undecodable

        if any(undecodable(arg) for arg in argv):
            return None  # click names the argument in its refusal
    line = _Line()
    i = _options(argv, 0, line, None)
    if i is None or i >= len(argv):
        return None
    words = [argv[i]]
    i += 1
    if words[0] == "sessions":
        i = _options(argv, i, line, None)
        if i is None or i >= len(argv):
            return None
        words.append(argv[i])
        i += 1
    line.command = " ".join(words)
    spec = _SPECS.get(line.command)
    if spec is None:
        return None
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-"):
            line.positional.append(arg)
            i += 1
            continue
        nxt = _options(argv, i, line, spec, one=True)
        if nxt is None:
            return None
        i = nxt
    if spec.positional == "required" and not line.positional:
        return None
    if spec.positional == "none" and line.positional:
        return None
    return line


def _options(
    argv: list[str], i: int, line: _Line, spec: _Spec | None, *, one: bool = False
) -> int | None:
    """Read options from ``argv[i]`` on (only one when ``one``); the index after them.

    Options are the common ones, and the command's own when ``spec`` is given. None
    when a token starting with ``-`` is not one of them, or its value is missing.
    """
    while i < len(argv) and argv[i].startswith("-"):
        nxt = _option(argv, i, line, spec)
        if nxt is None or one:
            return nxt
        i = nxt
    return i


def _option(argv: list[str], i: int, line: _Line, spec: _Spec | None) -> int | None:
    """Read the option at ``argv[i]`` (and its value); the index after it, or None."""
    flags = spec.flags if spec is not None else {}
    values = spec.values if spec is not None else {}
    name, eq, given = argv[i].partition("=")
    if not name.startswith("--") or name == "--":
        return None  # -h, -V, a bare "-", "--"
    if name == "--json" or name in flags:
        if eq:
            return None  # "--json=…": click's refusal
        if name == "--json":
            line.json = True
        else:
            line.options[flags[name]] = True
        return i + 1
    if name in ("--color", "--colour"):
        return _colour(argv, i, given if eq else None)
    if name not in _COMMON and name not in values:
        return None
    if eq:
        value, i = given, i + 1
    elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
        value, i = argv[i + 1], i + 2
    else:
        return None  # no value, or one click might read as an option
    if name in _COMMON:
        line.settings.append((_COMMON[name], value))
    else:
        line.options[values[name]] = value
    return i


def _colour(argv: list[str], i: int, given: str | None) -> int | None:
    """``--color WHEN``: set the choice (:mod:`meshctl.cli._terminal`); the index after it.
    None (click's refusal) for a value click would not take."""
    if given is None:
        if i + 1 >= len(argv):
            return None
        given, i = argv[i + 1], i + 1
    if given not in ("auto", "always", "never"):
        return None
    from meshctl.cli import _terminal

    _terminal.choice = given
    return i + 1


def _seconds(
    text: Any, *, minimum: float = 0.0, open_min: bool = False, maximum: float = _ONE_YEAR
) -> float | None:
    """``Seconds.convert`` (meshctl.cli._params) when it accepts ``text``, else None."""
    try:
        number = float(str(text).strip())
    except ValueError:
        return None
    low = number <= minimum if open_min else number < minimum
    if number - number != 0 or low or number > maximum:  # NaN, ±inf (math.isfinite)
        return None
    return number


def _kwargs(line: _Line) -> dict[str, Any] | None:
    """The body's keyword arguments, converted as click converts them; None if click
    would refuse one of them (it then says why)."""
    opts = line.options
    if line.command == "claim":
        from meshctl.cli._claims_body import TTL_RANGE, WAIT_RANGE

        ttl = None if "ttl" not in opts else _seconds(opts["ttl"], **TTL_RANGE)
        wait = 0.0 if "wait" not in opts else _seconds(opts["wait"], **WAIT_RANGE)
        if ("ttl" in opts and ttl is None) or wait is None:
            return None
        return {
            "shared": opts.get("shared", False),
            "reason": opts.get("reason", ""),
            "ttl": ttl,
            "wait": wait,
            "broad": opts.get("broad", False),
        }
    if line.command == "heartbeat":
        from meshctl.cli._lifecycle_body import STATUSES

        if "status" in opts and opts["status"] not in STATUSES:
            return None
        if "task" in opts and not opts["task"].strip():
            return None  # click says --task is empty
        return {"status": opts.get("status"), "task": opts.get("task")}
    if line.command == "register":
        return _register_kwargs(opts)
    if line.command == "end":
        return {"handoff": opts.get("handoff")}
    if line.command == "check":
        return {"all_profiles": opts.get("all_profiles", False)}
    if line.command == "sessions active":
        return {
            "all_profiles": opts.get("all_profiles", False),
            "fresh": opts.get("fresh", False),
            "local": opts.get("local", False),
        }
    return {}


def _register_kwargs(opts: dict[str, Any]) -> dict[str, Any] | None:
    """``register``'s keyword arguments as click converts them, or None (click refuses)."""
    from meshctl.cli._lifecycle_body import STATUSES

    if "task" not in opts or ("slot" in opts and "parent" not in opts):
        return None  # --task is required; --slot needs --parent
    if not opts["task"].strip():
        return None  # click says --task is empty
    if any(k in opts and not opts[k].strip() for k in ("session_id", "parent")):
        return None  # click says --id or --parent is empty
    if "expire_after" in opts and opts.get("liveness") != "heartbeat":
        return None  # --expire-after needs --liveness heartbeat
    if opts.get("liveness", "process") not in ("process", "heartbeat"):
        return None
    if "status" in opts and opts["status"] not in STATUSES:
        return None
    pid = None
    if "pid" in opts:
        try:
            pid = int(opts["pid"])
        except ValueError:
            return None
        if pid < 1:
            return None
    expire_after = None
    if "expire_after" in opts:
        expire_after = _seconds(opts["expire_after"], open_min=True)
        if expire_after is None:
            return None
    return {
        "task": opts["task"],
        "source": opts.get("source"),
        "pid": pid,
        "session_id": opts.get("session_id"),
        "liveness": opts.get("liveness", "process"),
        "expire_after": expire_after,
        "parent": opts.get("parent"),
        "slot": opts.get("slot"),
        "queries": not opts.get("no_queries", False),
        "messages": not opts.get("no_messages", False),
        "status": opts.get("status"),
    }


def _valid(name: str, value: str) -> bool:
    """Whether click's option callback (``_context._store``) accepts the value."""
    from meshctl.cli._state import undecodable  # loaded for the State anyway

    if undecodable(value):
        return False
    if name == "profile":
        from meshd.protocol.contract import is_profile

        return is_profile(value)
    if name == "socket":
        return os.path.isabs(value)
    return True


def state_for(line: _Line, environ: Any = None) -> State | None:
    """The :class:`State` click's root options would give, or None if click would refuse."""
    from meshctl.cli._state import State

    read = _env.get if environ is None else environ.get
    from meshd.protocol.trust import env_path_problem

    if env_path_problem() is not None:
        return None  # click says it, as a usage error
    state = State()
    state.json = line.json
    values: dict[str, str | None] = {"profile": "default", "socket": None, "session": None}
    for name, var in _ENV.items():
        if value := read(var):
            if not _valid(name, value):
                return None
            values[name] = value
    for name, value in line.settings:
        if not _valid(name, value):
            return None
        values[name] = value
        state.explicit.add(name)
    state.profile = values["profile"] or "default"
    state.socket = values["socket"]
    state.session = values["session"]
    return state


def main(argv: list[str]) -> None:
    """Run ``argv`` if it is a hot command the fast path takes (never returns then)."""
    if _env.isset("MESHCTL_DEBUG") or _env.isset("_MESHCTL_COMPLETE"):
        return  # tracebacks and completion are click's
    line = parse(argv)
    if line is None:
        return
    kwargs = _kwargs(line)
    state = state_for(line)
    if kwargs is None or state is None:
        return
    _run(state, line, kwargs)


def _body(state: State, line: _Line, kwargs: dict[str, Any]) -> Any:
    resources = tuple(line.positional)
    if line.command == "check":
        from meshctl.cli import _claims_body

        return _claims_body.check(state, resources, kwargs["all_profiles"])
    if line.command == "claim":
        from meshctl.cli import _claims_body

        return _claims_body.claim(state, resources, **kwargs)
    if line.command == "release":
        from meshctl.cli import _claims_body

        return _claims_body.release(state, resources)
    if line.command in ("heartbeat", "register", "end"):
        from meshctl.cli import _lifecycle_body

        return getattr(_lifecycle_body, line.command)(state, **kwargs)
    from meshctl.cli import _sessions_body

    return _sessions_body.active(state, **kwargs)


class _Pacified:
    """A stream whose ``flush`` keeps quiet about a reader that went away, as click's
    ``_PacifyFlushWrapper`` (the interpreter flushes stdout and stderr at exit)."""

    def __init__(self, wrapped: Any) -> None:
        self.wrapped = wrapped

    def flush(self) -> None:
        import errno

        try:
            self.wrapped.flush()
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


class _Abort(Exception):
    """click's Abort: Ctrl-C (or end of input) while the command ran."""


def _run(state: State, line: _Line, kwargs: dict[str, Any]) -> NoReturn:
    """The command, with failures handled as ``MeshGroup.main`` and click's ``main`` do."""
    import errno

    from meshctl.cli import _output
    from meshd.protocol.errors import MeshError

    try:
        try:
            try:
                rv = _body(state, line, kwargs)
            except MeshError as exc:  # MeshGroup.invoke
                raise _failure(exc, line) from exc
        except (EOFError, KeyboardInterrupt) as exc:  # click's main: a newline, then Abort
            if sys.stderr is not None:
                sys.stderr.write("\n")
                sys.stderr.flush()
            raise _Abort from exc
        except OSError as exc:  # click's main: a reader that went away exits 1, quietly
            if exc.errno != errno.EPIPE:
                raise
            sys.stdout = _Pacified(sys.stdout)
            sys.stderr = _Pacified(sys.stderr)
            sys.exit(1)
    except _output.Failure as failure:
        _output.report(failure, state.json)
        sys.exit(failure.exit_code)
    except (_Abort, KeyboardInterrupt):
        sys.exit(130)
    except Exception as exc:  # the last guard: one sentence, never a traceback
        _output.report(_output.internal_error(exc), state.json)
        sys.exit(_output.EXIT_ERROR)
    finally:
        state.close()
    sys.exit(rv if isinstance(rv, int) else 0)


def _failure(exc: MeshError, line: _Line) -> Exception:
    """``MeshGroup.invoke``'s translation: a daemon's ``INVALID_PARAMS`` about an argument
    the user typed is a usage error naming it (that needs the click command's
    parameters, so click is imported for this refusal only); the rest as they are."""
    from meshctl.cli import _output
    from meshd.protocol.errors import InvalidParams

    if isinstance(exc, InvalidParams):
        from meshctl.cli._params import usage_from

        usage = usage_from(exc, _click_context(line.command.split()))
        if usage is not None:
            return usage
    return _output.from_mesh_error(exc)


def _click_context(words: list[str]) -> click.Context:
    """The context click would have made for the command ``words`` (names, parameters)."""
    import click

    from meshctl.cli._root import cli

    ctx = click.Context(cli, info_name="meshctl")
    command: Any = cli
    for word in words:
        command = command.get_command(ctx, word)
        ctx = click.Context(command, info_name=word, parent=ctx)
    return ctx
