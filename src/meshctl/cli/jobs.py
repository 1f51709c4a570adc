"""``meshctl jobs`` (the radar), ``meshctl job run NAME -- COMMAND…``, ``meshctl job wait NAME``.

Jobs are declared in ``config.toml`` (SPEC §7)::

    [jobs.backup]
    resources = ["~/projects", "cron:backup"]
    policy = "wait"        # or "skip": defer at once when anything is held
    timeout = 900          # how long "wait" waits
    critical = true        # a deferral is never silent (shown by jobs and sync)

``job run NAME -- COMMAND`` is ``run`` with the job's resources and policy: it
registers its own short-lived session (``source: cron``, a child of
``--session``/``MESH_SESSION`` when given), claims the job's resources (``skip``:
no wait; ``wait``: up to ``timeout``), and when they stay held exits 75
(``--held-exit N``) without running COMMAND and records the deferral with who held
what; otherwise it records the start, runs COMMAND exactly as ``run`` does, and
records the end with COMMAND's status. The daemon keeps the radar: every declared
job, what runs, the last start/end/exit, deferrals, and what it would wait for now.
A run killed with ``kill -9`` (``job run`` and COMMAND) is shown ``died``.
"""

from __future__ import annotations

import time
from typing import Any

import click

from meshctl import _claims
from meshctl.cli import _output, _time
from meshctl.cli._context import common_options, get_state
from meshctl.cli._own import Leaving, own_params
from meshctl.cli._params import Seconds, Whole
from meshd.protocol.errors import MeshError, MeshUnavailable


@click.command()
@common_options
def jobs() -> None:
    """The radar: every declared job, running or not, and what it would wait for now.

    \b
    Examples:
      meshctl jobs
      meshctl jobs --json
    """
    state = get_state()
    result = state.call("job.list", {})
    _output.emit(state.json, result, lambda: render_radar(_output.clean(result.get("jobs") or [])))


def _when(ev: dict[str, Any] | None) -> str:
    if not ev:
        return "never"
    return _time.ago(ev.get("at"))


def _holders(holders: list[dict[str, Any]]) -> str:
    return "; ".join(_output.safe(_claims.holder_line(h)) for h in holders) or "nobody"


def _head(job: dict[str, Any]) -> str:
    traits = [job.get("policy") or "?"]
    if job.get("critical"):
        traits.append("critical")
    if job.get("once"):
        traits.append(f"once {job['once']}")
    if not job.get("declared"):
        traits.append("no longer declared")
    res = ", ".join(_claims.show_resource(r) for r in job.get("resources") or [])
    return f"- {job['name']} [{', '.join(traits)}] {res}".rstrip()


def _last(job: dict[str, Any]) -> str:
    end = job.get("last_end")
    if not end:
        return "never ran" if not job.get("last_start") else "no run finished yet"
    outcome = end.get("outcome")
    if outcome == "died":
        what = "DIED (killed before it could report its end)"
    else:
        what = f"exit {end.get('exit')}"
    return f"last ended {_when(end)}, {what}"


def render_radar(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "No jobs declared (add [jobs.NAME] tables to config.toml; see `meshctl job --help`)."
    lines = ["Jobs:"]
    for job in rows:
        lines.append(_head(job))
        if run := job.get("running"):
            lines.append(f"    running, started {_when(run)} (session {run.get('session_id')})")
        lines.append(f"    {_last(job)}; deferred {_times(job.get('deferrals', 0))}")
        for ev in job.get("pending") or []:
            held = _holders(ev.get("holders") or [])
            lines.append(f"    NOT RUN (critical) {_when(ev)}: held: {held}")
        wait = job.get("would_wait_for") or []
        lines.append(f"    now it would wait for: {_holders(wait)}")
    return "\n".join(lines)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@common_options
def job() -> None:
    """Run or wait for a job declared in config.toml ([jobs.NAME])."""


class JobRunCommand(click.Command):
    """COMMAND only after ``--``, as for ``run``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # resilient_parsing: shell completion parses half-typed lines (`run --<TAB>`)
        needs = not ctx.resilient_parsing and not any(a in ("-h", "--help") for a in args)
        if needs and "--" not in args:
            raise click.UsageError("put -- before COMMAND: meshctl job run NAME -- COMMAND…", ctx)
        return super().parse_args(ctx, args)


@job.command(
    "run",
    cls=JobRunCommand,
    epilog=(
        "Exit: COMMAND's status (128+N for signal N), also when meshd goes away while it "
        "runs (what could not be recorded is said on stderr; no daemon is started for it); "
        "75 (or --held-exit) when deferred."
    ),
)
@common_options
@click.option(
    "--held-exit",
    type=Whole(0, 255),
    default=_output.EXIT_TEMPFAIL,
    show_default=True,
    metavar="N",
    help="Exit status when deferred (held).",
)
@click.argument("name")
@click.argument("command", nargs=-1, required=True, metavar="-- COMMAND…")
def job_run(name: str, held_exit: int, command: tuple[str, ...]) -> int:
    """Run COMMAND as job NAME: its resources held, its policy applied, its run recorded.

    \b
    Examples:
      meshctl job run backup -- ./backup.sh
      meshctl job run watchdog --held-exit 0 -- ./watchdog.sh   # a deferral is not an error
    """
    from meshctl.cli import run as _run

    state = get_state()
    argv = list(command)  # everything after `--` (options before it may follow NAME)
    mesh = state.mesh()
    decl = _known(state, name)
    params = own_params(state, "cron", f"job {name}: {_run._shown(argv)}")
    reg = mesh.call("session.register", params)
    if reg.get("disabled"):
        _output.note("the mesh is disabled (enabled = false in config): running COMMAND unguarded")
        return _run._run_unguarded(argv, state.socket)
    guard = _run._Guard(mesh, params, reg)
    try:
        slot_key = _reserve_slot(state, mesh, guard.sid, name=name, decl=decl, argv=argv)
        if slot_key is False:
            return held_exit
        wait = float(decl["timeout"]) if decl["policy"] == "wait" else 0.0
        from meshctl.cli._claims_body import acquire_for

        wanted = _claims.acquire_params(
            guard.sid, list(decl["resources"]), reason=f"job {name}", wait=wait
        )
        try:
            result = acquire_for(state, wanted, wait)
        except _output.Failure as failure:
            if failure.data.get("went_away"):
                guard.forget()  # as run: no daemon is started only to end the session
            raise
        if result.get("status") != "granted":
            holders = result.get("holders") or []
            _record(state, "job.defer", {"name": name, "session_id": guard.sid, "holders": holders})
            if state.json:
                _output.write_json(_claims.cli_document(result))
            critical = " (critical: recorded, shown by `meshctl jobs` and `sync`)"
            click.echo(
                f"meshctl: job {name} deferred{critical if decl['critical'] else ''}:\n"
                + _claims.held_lines(_output.clean(result)),
                err=True,
            )
            _finish_slot(guard.leaving, guard.sid, slot_key, "free")
            return held_exit
        _record(state, "job.start", {"name": name, "session_id": guard.sid})
        code = guard.run(argv)
        _ended(guard.leaving, {"name": name, "session_id": guard.sid, "exit": code & 0xFF})
        _finish_slot(guard.leaving, guard.sid, slot_key, "done" if code == 0 else "free")
        return code
    finally:
        guard.end()


def slot(once: str, now: float) -> str:
    """The ledger slot of a ``once`` job at wall time ``now`` (UTC): a day or an hour."""
    t = time.gmtime(now)
    if once == "daily":
        return time.strftime("%Y-%m-%d", t)
    if once == "hourly":
        return time.strftime("%Y-%m-%dT%H", t)
    return ""


def _reserve_slot(
    state: Any, mesh: Any, sid: str, *, name: str, decl: dict[str, Any], argv: list[str]
) -> str | bool | None:
    """A ``once`` job reserves ``job:NAME:<slot>`` in the ledger first (SPEC §7).

    The key (reserved), None (the job has no ``once``), or False when the slot is
    already done, running or unknown: said on stderr, and COMMAND must not run.
    """
    if not decl.get("once"):
        return None
    from meshctl.cli.once import held_text

    key = f"job:{name}:{slot(decl['once'], time.time())}"
    result = mesh.call(
        "once.reserve", {"session_id": sid, "key": key, "note": " ".join(argv)[:200]}
    )
    if result.get("status") == "reserved":
        return key
    if state.json:
        _output.write_json(result)
    said = held_text(_output.clean(result)).removeprefix("meshctl: ")
    click.echo(f"meshctl: job {name}: {said}", err=True)
    return False


def _finish_slot(leaving: Leaving, sid: str, key: str | bool | None, outcome: str) -> None:
    """Record the slot done (COMMAND exited 0) or free it (failed, or deferred); on the
    way out, so never to a daemon started only for it."""
    if not isinstance(key, str):
        return
    then = (
        f"it turns unknown once this run's session is gone: check, then meshctl once "
        f"--resolve {key} done|free"
    )
    try:
        leaving.call(
            "once.finish", {"session_id": sid, "key": key, "outcome": outcome},
            f"the outcome of {key} ({outcome}; {then})",
        )  # fmt: skip
    except MeshError as exc:
        _output.note(f"could not record {outcome} for {key} ({exc.message}); {then}")


def _ended(leaving: Leaving, params: dict[str, Any]) -> None:
    """Tell the radar the job ended; COMMAND is done, so never to a daemon started for it."""
    what = f"the end of job {params['name']} (exit {params['exit']}) for `meshctl jobs`"
    try:
        leaving.call("job.end", params, what)
    except MeshError as exc:
        _output.note(f"could not record job.end on the radar: {exc.message}")


def _known(state: Any, name: str) -> dict[str, Any]:
    """The declaration of ``name``, or an error naming the declared jobs."""
    try:
        decl: dict[str, Any] = state.call("job.get", {"name": name})
    except MeshError as exc:
        if exc.data_code != "NOT_FOUND":
            raise
        known = exc.data.get("known") or []
        raise _output.Failure(
            f"no job named {name!r} is declared"
            + (f"; known jobs: {', '.join(known)}" if known else "; none is declared"),
            "NOT_FOUND",
            code=exc.code,  # the daemon's NOT_FOUND code, as every other refusal keeps
            data={"name": name, "known": known},
            hint="declare it as a [jobs.NAME] table in config.toml, then `meshctl daemon reload`",
        ) from exc
    return decl


def _record(state: Any, method: str, params: dict[str, Any]) -> None:
    """Tell the radar; a failure is reported, never fatal to the job."""
    try:
        state.call(method, params)
    except MeshUnavailable:
        raise
    except MeshError as exc:
        _output.note(f"could not record {method} on the radar: {exc.message}")


@job.command("wait")
@common_options
@click.option(
    "--timeout",
    type=Seconds(maximum=86_400),
    default=60.0,
    show_default=True,
    metavar="S",
    help="Give up after S seconds (exit 75).",
)
@click.argument("name")
def job_wait(name: str, timeout: float) -> int:
    """Wait until the running run of job NAME ends; at once when it is not running.

    \b
    Examples:
      meshctl job wait backup --timeout 600 && ./after-backup.sh
    """
    state = get_state()
    _known(state, name)
    mesh = state.mesh()
    from meshctl.cli._waiting import job_detail, ran_out, waiting

    deadline = time.monotonic() + timeout
    with waiting(f"waiting for job {name} to end", timeout, job_detail(mesh, name)):
        result = _wait_loop(mesh, name, deadline)
    if result.get("timed_out"):
        ran_out(timeout, f"job {name} is still running")

    def human() -> str:
        if result.get("timed_out"):
            return ""  # said on stderr: the wait ran out
        if not result.get("was_running"):
            return f"job {name} is not running ({_last(result)})"
        return f"job {name} ended: {_last(result)}"

    _output.emit(state.json, result, human)
    return _output.EXIT_TEMPFAIL if result.get("timed_out") else 0


def _wait_loop(mesh: Any, name: str, deadline: float) -> dict[str, Any]:
    """``job.wait`` until the run ends or ``deadline``; the daemon caps each call at
    ``max_query_timeout``, so ask again until ours runs out."""
    while True:
        left = max(deadline - time.monotonic(), 0.0)
        result: dict[str, Any] = mesh.call(
            "job.wait", {"name": name, "timeout": left}, timeout=left + mesh.timeout
        )
        if not result.get("timed_out") or time.monotonic() >= deadline:
            return result


def _times(n: Any) -> str:
    """``1 time``, ``3 times`` (``meshctl jobs`` and ``sync``)."""
    return f"{n} time" if n == 1 else f"{n} times"
