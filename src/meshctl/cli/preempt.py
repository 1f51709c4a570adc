"""``meshctl preempt``, ``pause`` and ``resume``: cooperative preemption (SPEC §5b).

``preempt RES…`` asks the lower-ranked holders of RES… to checkpoint and pause
(exit 0 when asked or free; 75 when a holder is not out-ranked, ``reason:
rank``: nobody is asked). Nothing is taken: when the grace runs out the
preemptor is told and the person may ``steal``. ``pause --note TEXT`` is the
holder's side at a safe point; ``resume`` queues for the reserved set and
prints the checkpoint note (exit 75 when ``--wait`` ran out, still paused).
"""

from __future__ import annotations

from typing import Any

import click

from meshctl import _claims
from meshctl.cli import _output
from meshctl.cli._context import common_options, get_state
from meshctl.cli._params import Seconds


@click.command()
@common_options
@click.argument("resources", metavar="RES…", nargs=-1, required=True)
@click.option("--reason", default="", metavar="R", help="Why (the holders are told).")
@click.option("--broad", is_flag=True, help="Allow file:/ or the home folder itself.")
def preempt(resources: tuple[str, ...], reason: str, broad: bool) -> int:
    """Ask the lower-ranked holders of RES… to checkpoint and pause.

    \b
    Examples:
      meshctl preempt res:gpu --reason 'urgent training run'
    """
    state = get_state()
    params: dict[str, Any] = {
        "session_id": state.require_session(),
        "resources": list(resources),
        "reason": reason,
        "broad": broad,
    }
    result = state.call("claim.preempt", params)
    _output.emit(state.json, result, lambda: _preempted(result))
    return _output.EXIT_TEMPFAIL if result.get("status") == "held" else _output.EXIT_OK


def _preempted(result: dict[str, Any]) -> str:
    holders = result.get("holders") or []
    if result.get("status") == "free":
        # claim.check leaves out the caller's own claims: "nobody" was wrong when it holds them
        return "free: no other session holds it; nothing to preempt"
    who = [
        f"{h['session_id']} (rank {h['rank']}) "
        + ("is paused; its reserved set holds " if h.get("paused") else "holds ")
        + ", ".join(h["resources"])
        for h in holders
    ]
    if result.get("status") == "held":
        lines = [f"held: {w}" for w in who]
        lines.append(f"held: reason rank: your rank {result.get('rank', 0)} does not out-rank them")
        return "\n".join(lines)
    grace = f"{float(result.get('grace_s') or 0):g} s"
    # The wall clock, not "in 4m": the deadline comes in whole seconds, so a relative
    # time read "ends 0s ago" for a 1 s grace and "in 4m" for 300 s.
    until = _claims.clock(result.get("deadline"))
    lines = [
        f"served first: {w}; claim it by {until}" if h.get("paused") else f"asked: {w}"
        for h, w in zip(holders, who, strict=True)
    ]
    if any(not h.get("paused") for h in holders):
        lines.append(f"grace {grace}, until {until}")
    return "\n".join(lines)


@click.command()
@common_options
@click.option(
    "--note", required=True, metavar="TEXT…", help="Where you stopped; given back on resume."
)
@click.argument("words", nargs=-1, metavar="")
def pause(note: str, words: tuple[str, ...]) -> None:
    """Checkpoint at a safe point: leave a note, release claims into a reserved set.

    The words after --note are the note, quoted or not (as send joins its words).

    \b
    Examples:
      meshctl pause --note 'paused at step 3 of the migration'
      meshctl pause --note paused at step 3
    """
    state = get_state()
    note = " ".join((note, *words))
    result = state.call("session.pause", {"session_id": state.require_session(), "note": note})

    def human() -> str:
        reserved = result.get("reserved") or []
        first = result.get("first") or []
        line = f"paused; reserved {', '.join(reserved)}" if reserved else "paused (held nothing)"
        return line + (f" (first for {', '.join(first)})" if first else "")

    _output.emit(state.json, result, human)


@click.command()
@common_options
@click.option(
    "--wait",
    type=Seconds(),
    default=None,
    metavar="S",
    help="Wait up to S seconds for the reserved set (default: the daemon's max_query_timeout).",
)
def resume(wait: float | None) -> int:
    """Queue for the reserved set; print the checkpoint note; status back.

    A session that is not paused has nothing to resume: said plainly, exit 0.

    \b
    Examples:
      meshctl resume --wait 600
    """
    state = get_state()
    sid = state.require_session()
    params: dict[str, Any] = {"session_id": sid}
    if wait is not None:
        params["wait"] = wait
    # The daemon's status says whether it is paused, as the daemon itself decides
    # whether to set the status back (session.resume does not say).
    before = state.call("session.get", {"session_id": sid}) or {}
    mesh = state.mesh()
    # The daemon waits at most its max_query_timeout (the whole wait when none is
    # given): the reply may take that long, not a fixed 60 s.
    cap = mesh.query_cap()
    timeout = _claims.wait_timeout(cap if wait is None else min(wait, cap), mesh.timeout)
    from meshctl.cli._waiting import claim_detail, ran_out, waiting

    detail = claim_detail(mesh, sid, None)
    with waiting("waiting for the reserved set", cap if wait is None else min(wait, cap), detail):
        result = state.call("session.resume", params, timeout=timeout)
    was_paused = before.get("status") == "paused" or result.get("reservation") != "none"
    result = {**result, "was_paused": was_paused}
    if result.get("status") == "held":
        ran_out(cap if wait is None else wait, "still paused", result.get("waited_s"))

    def human() -> str:
        note = result.get("note") or "(no checkpoint note)"
        if result.get("status") == "held":
            return f"held: still paused; the reserved set is not free yet\nnote: {note}"
        if not was_paused:
            return f"{sid} was not paused: nothing to resume"
        how = {"lost": " (the reservation was lost in a daemon restart)", "none": ""}
        return f"resumed{how.get(result.get('reservation', ''), '')}\nnote: {note}"

    _output.emit(state.json, result, human)
    return _output.EXIT_TEMPFAIL if result.get("status") == "held" else _output.EXIT_OK
