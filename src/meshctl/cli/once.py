"""``meshctl once --key K [--ttl S] [--held-exit N] -- COMMAND…`` | ``once --resolve K
done|free`` | ``once --list`` (SPEC §7, §9): an external side effect, at most once.

1. registers a short-lived session of its own (``source: once``, a child of
   ``--session``), ``liveness: process`` for once's pid -- as ``run`` does;
2. reserves K (``once.reserve``); the daemon syncs the reservation to disk
   before it answers, and COMMAND is started only after that answer. When K is
   ``running``, ``done`` or ``unknown`` it says who and when on stderr and exits
   75 (``--held-exit N`` instead) without running COMMAND;
3. runs COMMAND exactly as ``run`` does (gated fork, COMMAND's pid a second
   liveness anchor of the session, stdio untouched, SIGINT/SIGTERM/SIGHUP
   forwarded, its exit status passed on, 128+N for signal N);
4. records ``done`` when COMMAND exits 0, frees K otherwise (it may run again);
5. ends its session.

**Never fails open**: when the daemon cannot be reached COMMAND is not run and
once exits 69 (there is no ``--fail-open``). When once (or COMMAND) is killed
before step 4 -- even ``kill -9`` of both -- the session dies with its
processes and the daemon turns K ``unknown``: it is not run again until a
person says what happened (``meshctl once --resolve K done|free``). With
``enabled = false`` in config COMMAND runs unguarded, with a warning, as SPEC
§2 says for ``run`` and ``once``.

``--ttl S``: a ``done`` record is forgotten S seconds after it was recorded, so
K may run again (at most once per S). Without it ``done`` stays until resolved;
put the period in the key for daily jobs (``report:2026-11-29``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from meshctl.cli import _output, _time
from meshctl.cli._context import State, common_options, get_state
from meshctl.cli._own import OwnSession
from meshctl.cli._params import Seconds, Whole
from meshctl.cli.run import _Guard, _run_unguarded
from meshd.protocol.errors import MeshError


def _who(e: Mapping[str, Any]) -> str:
    """Who made an entry what it is: the person who resolved it by hand, else the
    session that ran it (SPEC §7: a second caller sees "who, when")."""
    if e.get("resolved_by"):
        return f"resolved by {e['resolved_by']}"
    return f"session {e.get('session_id')}"


def render_entry(e: Mapping[str, Any]) -> str:
    note = f" — {e['note']}" if e.get("note") else ""
    ran = e.get("session_id")
    resolved = f", resolved by {e['resolved_by']}" if e.get("resolved_by") else ""
    session = f"session {ran}, " if ran and ran != e.get("resolved_by") else ""
    return (
        f"{e.get('key')}: {e.get('state')} ({session}reserved "
        f"{_time.ago(e.get('reserved_at'))}, updated {_time.ago(e.get('updated_at'))}"
        f"{resolved}){note}"
    )


def render_list(entries: Sequence[Mapping[str, Any]]) -> str:
    if not entries:
        return "The ledger is empty: every key is free."
    return "\n".join(["Ledger:", *(f"- {render_entry(e)}" for e in entries)])


def held_text(result: Mapping[str, Any]) -> str:
    e = result.get("entry") or {}
    key, status = result.get("key"), result.get("status")
    why = {
        "running": f"is running now (session {e.get('session_id')}, "
        f"started {_time.ago(e.get('reserved_at'))})",
        "done": f"is done ({_who(e)}, {_time.ago(e.get('updated_at'))})",
        "unknown": (
            f"is unknown: its runner (session {e.get('session_id')}, started "
            f"{_time.ago(e.get('reserved_at'))}) went away before saying how it ended.\n"
            f"  Check whether it happened, then: meshctl once --resolve {key} done|free"
        ),
    }.get(str(status), str(status))
    return f"meshctl: not running COMMAND: {key} {why}"


class OnceCommand(click.Command):
    """COMMAND only after ``--``; ``--list`` and ``--resolve`` take none."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        head = args[: args.index("--")] if "--" in args else args
        wants_command = not ({"--list", "--resolve", "-h", "--help"} & set(head))
        if wants_command and "--" not in args and not ctx.resilient_parsing:  # completion
            raise click.UsageError("put -- before COMMAND: meshctl once --key K -- COMMAND…", ctx)
        return super().parse_args(ctx, args)


@click.command(
    cls=OnceCommand,
    context_settings={"allow_interspersed_args": False},
    epilog=(
        "Exit: COMMAND's status; 75 (or --held-exit) when K is running, done or unknown; "
        "69 when the daemon is unreachable (COMMAND is then NOT run)."
    ),
)
@common_options
@click.option("--key", "key", metavar="K", help="The side effect's key (report:2026-11-29).")
@click.option("--ttl", type=Seconds(open_min=True), metavar="S",
              help="Forget a done record after S seconds (K may run again).")  # fmt: skip
@click.option(
    "--held-exit", type=Whole(0, 255), default=_output.EXIT_TEMPFAIL,
    show_default=True, metavar="N", help="Exit status when K is not free.",
)  # fmt: skip
@click.option("--resolve", nargs=2, metavar="K done|free", help="Settle K by hand.")
@click.option("--list", "listing", is_flag=True, help="Show every key that is not free.")
@_time.since_option("keys updated")
@click.argument("command", nargs=-1, metavar="-- COMMAND…")
def once(
    *,
    key: str | None,
    ttl: float | None,
    held_exit: int,
    resolve: tuple[str, str] | None,
    listing: bool,
    since: float | None,
    command: tuple[str, ...],
) -> int:
    """Run COMMAND at most once for key K (a report, a payment, a deploy).

    \b
    Examples:
      meshctl once --key report:2026-11-29 -- ./send-report.sh
      meshctl once --resolve report:2026-11-29 done
      meshctl once --list --since 1d
    """
    if since is not None and not listing:
        raise click.UsageError("--since goes with --list")
    _one_form(listing, resolve, key, ttl, command)
    if listing:
        return _list(since)
    if resolve:
        return _resolve(*resolve)
    if not key or not command:
        raise click.UsageError("give --key K -- COMMAND…, --resolve K done|free, or --list")
    return _run(key, ttl, held_exit, list(command))


def _one_form(
    listing: bool,
    resolve: tuple[str, str] | None,
    key: str | None,
    ttl: float | None,
    command: tuple[str, ...],
) -> None:
    """The three forms are alternatives (SPEC §9 ``once --key K … -- COMMAND… | once
    --resolve K done|free``): ``--resolve`` or ``--list`` given with the run form's
    ``--key``, ``--ttl``, ``--held-exit`` or COMMAND is a usage error. Taken silently, the
    person's COMMAND did not run and once exited 0."""
    ctx = click.get_current_context()
    held_exit = ctx.get_parameter_source("held_exit") is not click.core.ParameterSource.DEFAULT
    run_form = [
        name
        for name, given in (
            ("--key", key is not None),
            ("--ttl", ttl is not None),
            ("--held-exit", held_exit),
            ("COMMAND", bool(command)),
        )
        if given
    ]
    other = [name for name, given in (("--list", listing), ("--resolve", resolve)) if given]
    if len(other) > 1 or (other and run_form):
        both = " and ".join([*other, *run_form][:2])
        raise click.UsageError(
            f"{both} do not go together: give --key K -- COMMAND… to run, "
            "--resolve K done|free to settle a key, or --list"
        )


def _run(key: str, ttl: float | None, held_exit: int, argv: list[str]) -> int:
    state = get_state()
    with OwnSession(state, "once", f"once {key}: {' '.join(argv)}") as own:
        if own.reg.get("disabled"):
            _output.note(
                "the mesh is disabled (enabled = false in config): running COMMAND unguarded"
            )
            return _run_unguarded(argv, state.socket)
        params: dict[str, Any] = {"session_id": own.sid, "key": key, "note": " ".join(argv)[:200]}
        if ttl is not None:
            params["ttl"] = ttl
        result = own.mesh.call("once.reserve", params)
        if result.get("status") != "reserved":
            if state.json:
                _output.write_json(result)
            click.echo(held_text(_output.clean(result)), err=True)
            return held_exit
        guard = _Guard(own.mesh, own.params, own.reg)
        code = guard.run(argv)
        _finish(own, key, "done" if code == 0 else "free")
        return code


def _finish(own: OwnSession, key: str, outcome: str) -> None:
    """Record the outcome; COMMAND is done, so never to a daemon started only for it."""
    then = (
        f"it turns unknown once this session is gone: check, then meshctl once --resolve "
        f"{key} done|free"
    )
    params = {"session_id": own.sid, "key": key, "outcome": outcome}
    try:
        done = own.leaving.call("once.finish", params, f"the outcome of {key} ({outcome}; {then})")
    except MeshError as exc:
        _output.note(f"could not record {outcome} for {key} ({exc.message}); {then}")
        return
    if done is not None and not done.get("ok"):
        _output.note(f"{key} is {done.get('state')} now, not recorded as {outcome}")


def _list(since: float | None) -> int:
    state = get_state()
    entries = state.call("once.list", {}).get("entries") or []
    entries = _time.oldest_first(_time.newer(entries, since, "updated_at"), "updated_at")
    _output.emit(state.json, entries, lambda: render_list(_output.clean(entries)))
    return _output.EXIT_OK


def _resolve(key: str, how: str) -> int:
    if how not in ("done", "free"):
        raise click.BadParameter(f"{how!r}: say done or free", param_hint="--resolve")
    state = get_state()
    import getpass

    params: dict[str, Any] = {"key": key, "state": how, "by": state.session or getpass.getuser()}
    if state.session:
        params["session_id"] = state.session
    result = state.call("once.resolve", params)
    if result.get("refused"):
        _output.emit(state.json, result, None)
        _output.note(f"not resolved: {_output.clean(result.get('reason'))}")
        return _output.EXIT_TEMPFAIL
    if not result.get("previous"):
        _no_entry(state, key, how)
    before = (result.get("previous") or {}).get("state", "free")
    _output.emit(state.json, result, lambda: _output.clean(f"{key}: {before} → {how}"))
    return _output.EXIT_OK


def _no_entry(state: State, key: str, how: str) -> None:
    """``--resolve`` of a key the ledger had no entry for: a typo, most likely. Freeing
    it did nothing (refused, naming the closest key); ``done`` is recorded (marking a
    key done beforehand is a person's right) and said."""
    from meshctl.cli._ids import closest_text

    entries = state.call("once.list", {}).get("entries") or []
    keys = [str(e.get("key")) for e in entries if e.get("key") != key]  # done: it is there now
    guess = closest_text(key, keys)
    mean = f"; did you mean {guess}?" if guess else ""
    shown = _output.safe(key)
    if how == "free":
        raise _output.Failure(
            f"no ledger entry {shown}: nothing to free{mean}", "NOT_FOUND",
            data={"key": key, "did_you_mean": guess},
            hint="see the keys with `meshctl once --list`",
        )  # fmt: skip
    _output.note(f"{shown} had no entry (nothing ran under it): recorded done by hand{mean}")
