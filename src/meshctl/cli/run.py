"""``meshctl run --res RES… [--task T] [--wait S] [--held-exit N] [--fail-open] -- COMMAND…``.

Runs COMMAND while holding RES…, for cron jobs and scripts (SPEC §9):

1. registers a short-lived session of its own (``source: run``, a child of
   ``--session``/``MESH_SESSION`` when given, so it never conflicts with, and
   never releases, its parent's claims), ``liveness: process`` for run's pid;
2. claims RES… as one set (queueing up to ``--wait`` seconds); when held it
   prints who holds it on stderr and exits 75 (``--held-exit N`` instead, for a
   COMMAND that may itself exit 75), without running COMMAND;
3. forks COMMAND *gated*: the child exists (so its pid is known) but waits on a
   pipe before ``exec``. run makes the child's pid a second liveness anchor of
   its session (``session.attach``), then opens the gate. So the session -- and its claims --
   lives while either run or COMMAND lives: a SIGKILLed run leaves COMMAND
   guarded until it exits, and a run killed before the gate opens takes the gate
   with it (the child sees EOF and exits without running COMMAND, never unguarded);
4. hands COMMAND its session's id in ``MESH_SESSION``; passes stdin/stdout/stderr
   through untouched, forwards SIGINT, SIGTERM and SIGHUP
   (not the ones the terminal already sent to COMMAND's process group: Ctrl-C
   reaches COMMAND once), heartbeats meanwhile so the session does not show as
   stale, and exits with COMMAND's status (128+N for signal N);
5. ends its session, which releases what it acquired.

A meshd without ``session.attach`` (-32601): run goes on quietly, and its claims
live with run alone (a SIGKILLed run frees them early).

When the daemon cannot be reached, run fails (exit 69) unless ``--fail-open``, which
runs COMMAND unguarded and says so on stderr. With ``enabled = false`` in config it
runs COMMAND unguarded and warns. Its own messages always go to stderr; with
``--json`` the claim document is printed on stdout only when COMMAND did not run
(held), since COMMAND owns stdout otherwise.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from meshctl import _claims
from meshctl._core import env as _env
from meshctl.cli import _output
from meshctl.cli._context import common_options, complete_paths, get_state
from meshctl.cli._own import Leaving, own_params
from meshctl.cli._params import Seconds, Whole
from meshd.protocol.errors import MeshError, MeshUnavailable, MethodNotFound

if TYPE_CHECKING:
    from meshctl._sync import Mesh

#: Anchors a session to one more process: it lives while any of its processes lives.
ATTACH = "session.attach"
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_SI_KERNEL = 0x80  # Linux si_code of signals the tty driver sent to a process group
_EXEC_FAILED = 127
_NOT_EXECUTABLE = 126


def expand_res(args: Sequence[str]) -> list[str]:
    """Let ``--res A B C -- CMD`` mean ``--res A --res B --res C -- CMD`` (SPEC's ``RES…``).

    Only before the first ``--``: everything after it is COMMAND, untouched.
    """
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out.extend(args[i:])
            break
        out.append(arg)
        i += 1
        if arg == "--res" and i < len(args):
            out.append(args[i])
            i += 1
            while i < len(args) and not args[i].startswith("-"):
                out.extend(("--res", args[i]))
                i += 1
    return out


class RunCommand(click.Command):
    """``run``'s parsing: variadic ``--res``, and COMMAND only after ``--``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # resilient_parsing: shell completion parses half-typed lines (`run --<TAB>`)
        needs = not ctx.resilient_parsing and not any(a in ("-h", "--help") for a in args)
        if needs and "--" not in args:
            raise click.UsageError("put -- before COMMAND: meshctl run --res RES -- COMMAND…", ctx)
        return super().parse_args(ctx, expand_res(args))


@click.command(
    cls=RunCommand,
    context_settings={"allow_interspersed_args": False},
    epilog=(
        "RES is kind:value (file:/p, port:N, res:NAME …) or an absolute path (a relative "
        'one is refused with BAD_KEY; type "$PWD"/src). Exit: COMMAND\'s status (128+N '
        "for signal N); 75 (or --held-exit) when held; 69 when the daemon is unreachable "
        "without --fail-open."
    ),
)
@common_options
@click.option(
    "--res",
    "resources",
    multiple=True,
    required=True,
    metavar="RES…",
    help="What to hold.",
    shell_complete=complete_paths,
)
@click.option("--task", metavar="T", help="The session's task (default: COMMAND).")
@click.option(
    "--wait",
    type=Seconds(),
    default=0.0,
    metavar="S",
    help="Queue up to S seconds for RES (FIFO; capped at the daemon's max_query_timeout).",
)
@click.option(
    "--held-exit",
    type=Whole(0, 255),
    default=_output.EXIT_TEMPFAIL,
    show_default=True,
    metavar="N",
    help="Exit status when held.",
)
@click.option(
    "--fail-open", is_flag=True, help="Daemon unreachable: run COMMAND unguarded (and say so)."
)
@click.option("--broad", is_flag=True, help="Allow file:/ or the home folder itself.")
@click.argument("command", nargs=-1, required=True, metavar="-- COMMAND…")
def run(
    *,
    resources: tuple[str, ...],
    task: str | None,
    wait: float,
    held_exit: int,
    fail_open: bool,
    broad: bool,
    command: tuple[str, ...],
) -> int:
    """Run COMMAND while holding RES…; exit with COMMAND's status.

    \b
    Examples:
      meshctl run --res res:db --wait 300 -- ./migrate.sh
      meshctl run --res "$PWD"/src --task 'format' -- ruff format src
    """
    state = get_state()
    argv = list(command)
    keys = list(resources)
    try:
        mesh = state.mesh()
        params = own_params(state, "run", task or _shown(argv))
        reg = state.call("session.register", params)
    except MeshUnavailable as exc:
        if not fail_open:
            raise
        _output.note(f"{exc.message}\nmeshctl: --fail-open: running COMMAND UNGUARDED (no claims)")
        return _run_unguarded(argv, state.socket)
    if reg.get("disabled"):
        _output.note("the mesh is disabled (enabled = false in config): running COMMAND unguarded")
        return _run_unguarded(argv, state.socket)
    guard = _Guard(mesh, params, reg)
    try:
        try:
            from meshctl.cli._claims_body import acquire

            wanted = _claims.acquire_params(
                guard.sid, keys, reason=task or "", wait=wait, broad=broad
            )
            result = acquire(state, wanted, wait)
        except MeshUnavailable as exc:
            if not fail_open:
                raise
            _output.note(f"{exc.message}\nmeshctl: --fail-open: running COMMAND UNGUARDED")
            return _run_unguarded(argv, state.socket)
        except _output.Failure as failure:
            # The daemon went away during the wait (exit 1, never failed open: the claim
            # waited on may still be held once it is back). Ending the session would
            # start a daemon only for that; a restarted one ends it, its process gone.
            if failure.data.get("went_away"):
                guard.forget()
            raise
        if result.get("status") != "granted":
            if state.json:
                _output.write_json(_claims.cli_document(result))
            else:
                from meshctl.cli._claims_body import with_branches

                with_branches(state, result.get("holders") or [])
            _output.say(_claims.held_lines(_output.clean(result)), err=True)
            return held_exit
        return guard.run(argv)
    finally:
        guard.end()


def _shown(argv: list[str]) -> str:
    """COMMAND as text for its task line: undecodable bytes written ``\\xe9``, not sent raw."""
    text = " ".join(argv)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class _Guard:
    """run's session around one COMMAND: anchors, heartbeats, the end."""

    def __init__(self, mesh: Mesh, params: dict[str, Any], reg: dict[str, Any]) -> None:
        self.mesh = mesh
        self.params = params
        self.sid = str(reg["session_id"])
        self.interval = float(reg.get("heartbeat_interval") or 5.0)
        self._ended = False
        self._quiet = False
        #: calls once COMMAND is done (or never ran): never start a daemon
        self.leaving = Leaving(mesh)

    def anchor(self, pid: int) -> None:
        """Make COMMAND's pid a second liveness anchor of the session (``session.attach``)."""
        try:
            self.mesh.call(ATTACH, {"session_id": self.sid, "pid": pid})
        except MethodNotFound:
            # An older meshd: the claims then live with run alone. Said in --help, not
            # on every run (cron mails whatever a job writes to stderr).
            pass
        except MeshError as exc:
            _output.note(f"could not tie the claims to COMMAND's pid: {exc.message}")

    def beat(self) -> None:
        """Keep the session from showing stale while COMMAND runs; failures are not fatal."""
        try:
            self.mesh.call("session.heartbeat", {"session_id": self.sid})
        except MeshError as exc:
            if not self._quiet:
                _output.note(f"heartbeat failed (COMMAND keeps running): {exc.message}")
                self._quiet = True

    def run(self, argv: list[str]) -> int:
        child = _Child(argv, session=self.sid, socket=self.mesh.socket_path)
        self.anchor(child.pid)
        return child.start_and_wait(self.beat, self.interval)

    def forget(self) -> None:
        """The daemon went away: nothing to end on it (see :meth:`end`)."""
        self._ended = True

    def end(self) -> None:
        """End the session: releases what it acquired (never its parent's claims).

        Never starts a daemon (:class:`~meshctl.cli._own.Leaving`): what could not be
        sent on the way out is said once, and the exit status stays COMMAND's."""
        if not self._ended:
            self._ended = True
            self.leaving.end(self.sid, "run finished")
        self.leaving.report()


def _run_unguarded(argv: list[str], socket: str | None) -> int:
    """COMMAND without a session (failing open, or the mesh disabled); ``socket``: the
    one the command line gave, for COMMAND's own meshctl calls."""
    return _Child(argv, socket=socket).start_and_wait(None, 3600.0)


def _as_json() -> bool:
    """Whether the command line asked for ``--json`` (read where no state is passed)."""
    return click.get_current_context(silent=True) is not None and get_state().json


class _Child:
    """COMMAND, forked and held at a gate until :meth:`start_and_wait` opens it."""

    def __init__(
        self, argv: list[str], session: str | None = None, socket: str | None = None
    ) -> None:
        self.argv = argv
        self.session = session
        gate_r, self._gate_w = os.pipe()
        self._err_r, err_w = os.pipe()
        self._blocked = (*_FORWARDED, signal.SIGCHLD)
        if hasattr(signal, "sigtimedwait"):
            signal.pthread_sigmask(signal.SIG_BLOCK, self._blocked)
        try:
            self.pid = os.fork()
        except OSError:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, self._blocked)
            raise
        if self.pid == 0:  # pragma: no cover - the child never returns
            _child_main(
                argv, gate_r, self._gate_w, self._err_r, err_w, session=session, socket=socket
            )
        os.close(gate_r)
        os.close(err_w)

    def start_and_wait(self, beat: Any, interval: float) -> int:
        """Open the gate, then wait for COMMAND, forwarding signals; its exit status."""
        os.write(self._gate_w, b"x")
        os.close(self._gate_w)
        failure = _read_all(self._err_r)
        os.close(self._err_r)
        if failure:
            code, _, message = failure.decode(errors="replace").partition(":")
            self._reap()
            status = int(code) if code.isdigit() else _EXEC_FAILED
            said = f"cannot run {self.argv[0]!r}: {message}"
            if _as_json():  # COMMAND did not run: SPEC §9's one document, an error
                _output.write_json(
                    _output.Failure(
                        said, "EXEC_FAILED", exit_code=status,
                        data={"command": self.argv[0], "exit": status},
                    ).to_json()
                )  # fmt: skip
            _output.note(said)
            return status
        if hasattr(signal, "sigtimedwait"):
            return self._wait_linux(beat, interval)
        return self._wait_portable()

    def _reap(self) -> int:
        _, status = _waitpid(self.pid, 0)
        return _exit_code(status)

    def _wait_linux(self, beat: Any, interval: float) -> int:
        """sigtimedwait loop: exact forwarding (si_code tells the tty's signals apart)."""
        try:
            next_beat = time.monotonic() + interval
            while True:
                done, status = _waitpid(self.pid, os.WNOHANG)
                if done:
                    return _exit_code(status)
                left = max(next_beat - time.monotonic(), 0.0)
                info = signal.sigtimedwait(self._blocked, left)
                if info is None:
                    if beat is not None:
                        beat()
                    next_beat = time.monotonic() + interval
                elif info.si_signo != signal.SIGCHLD and self._forward(info.si_code):
                    _kill(self.pid, info.si_signo)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, self._blocked)

    def _forward(self, si_code: int) -> bool:
        """Forward unless the terminal sent it to a process group COMMAND is in."""
        if si_code != _SI_KERNEL:
            return True
        try:
            return os.getpgid(self.pid) != os.getpgrp()
        except OSError:
            return False

    def _wait_portable(self) -> int:  # pragma: no cover - platforms without sigtimedwait
        """Handlers forward every signal; waitpid resumes after each (PEP 475)."""
        for signum in _FORWARDED:
            signal.signal(signum, lambda n, _f: _kill(self.pid, n))
        return self._reap()


def _child_main(
    argv: list[str],
    gate_r: int,
    gate_w: int,
    err_r: int,
    err_w: int,
    *,
    session: str | None,
    socket: str | None = None,
) -> None:
    """In the forked child: wait at the gate, then exec COMMAND (never returns).

    COMMAND gets run's own session in ``MESH_SESSION`` (SPEC §9), so it can
    heartbeat, send and claim as itself, and the socket run was given (``--socket``)
    in ``MESH_SOCKET``, so it reaches the same daemon. Otherwise the environment is
    passed on as it is.
    """
    code = _EXEC_FAILED
    try:
        os.close(gate_w)
        os.close(err_r)
        for signum in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, *_FORWARDED):
            signal.signal(signum, signal.SIG_DFL)
        if _read_all(gate_r, 1) != b"x":
            os._exit(_output.EXIT_TEMPFAIL)  # run died before opening the gate: never unguarded
        os.close(gate_r)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        passed = {"MESH_SESSION": session, "MESH_SOCKET": socket}
        try:
            os.execvpe(argv[0], argv, _env.child(**{k: v for k, v in passed.items() if v}))
        except OSError as exc:
            code = _NOT_EXECUTABLE if isinstance(exc, PermissionError) else _EXEC_FAILED
            os.write(err_w, f"{code}:{exc.strerror or exc}".encode())
    finally:
        os._exit(code)


def _read_all(fd: int, limit: int = 4096) -> bytes:
    out = b""
    while len(out) < limit:
        try:
            chunk = os.read(fd, limit - len(out))
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue
        if not chunk:
            break
        out += chunk
    return out


def _waitpid(pid: int, flags: int) -> tuple[int, int]:
    try:
        return os.waitpid(pid, flags)
    except ChildProcessError:
        return pid, 0


def _exit_code(status: int) -> int:
    """COMMAND's exit status, 128+N when signal N ended it (the shell's convention)."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _kill(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)
