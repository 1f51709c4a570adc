"""``meshctl claim``, ``release``, ``check``, ``steal``, ``validate`` and ``log`` (SPEC §5, §9).

Keys are ``kind:value`` (``file:/abs/path``, ``port:8080``, ``branch:/repo:main`` …).
A bare path means ``file:PATH``. Keys are sent as typed: the daemon canonicalises
them (``~``, ``.``/``..``, symlinks) and refuses a **relative path** with ``BAD_KEY``
naming it (exit 1); the message then shows the absolute path it would mean
(``"$PWD"/src/a.py`` is what to type).

Exit codes: ``claim`` 0 granted, 75 held (also when ``--wait`` ran out);
``check`` 75 only when another session's claim overlaps, 0 otherwise (sessions
merely working there are printed as a notice); ``steal`` 0 done; ``validate`` 0 while
the token is the holder's, 75 once it is not (an outcome, as ``held`` is). Human output is
the sentence a person needs ("held: cli:… is editing ~/project (branch feat/auth)
since 14:02 — refactor auth"); ``--json`` prints the daemon's answer in SPEC §9's
shape. When the mesh is disabled, ``claim`` and ``check`` succeed as no-ops and
say so on stderr.

The bodies of ``claim``, ``release`` and ``check`` are in :mod:`meshctl.cli._claims_body`
(no click there: the fast path of the hot commands runs them too); this module holds
their options and help.
"""

from __future__ import annotations

from typing import Any

import click

from meshctl import _claims
from meshctl.cli import _claims_body, _output, _time
from meshctl.cli._claims_body import MAX_PRESENT, acquire, render_check
from meshctl.cli._context import common_options, complete_held, complete_paths, get_state
from meshctl.cli._params import Seconds, Whole

__all__ = [
    "MAX_PRESENT",
    "acquire",
    "check",
    "claim",
    "log_",
    "release",
    "render_check",
    "render_log",
    "steal",
    "validate",
]

RES_HELP = (
    "RES is kind:value (file:/p, repo:/p, branch:/repo:NAME, port:N, res:NAME …); a bare "
    "path means file:PATH. Paths are absolute (~ is expanded): a relative one is refused "
    'with BAD_KEY; type "$PWD"/src/a.py.'
)


# --- claim ----------------------------------------------------------------------------


@click.command(epilog=RES_HELP)
@common_options
@click.argument("resources", metavar="RES…", nargs=-1, required=True, shell_complete=complete_paths)
@click.option("--shared", is_flag=True, help="Shared mode: many shared holders, no exclusive.")
@click.option("--reason", default="", metavar="R", help="Why (shown to whoever is held).")
@click.option(
    "--ttl", type=Seconds(**_claims_body.TTL_RANGE), metavar="S", help="Free it after S s."
)
@click.option(
    "--wait",
    type=Seconds(**_claims_body.WAIT_RANGE),
    default=0.0,
    metavar="S",
    help="Queue up to S seconds for the whole set (FIFO; the daemon caps one wait at "
    "its max_query_timeout, 60 s by default).",
)
@click.option("--broad", is_flag=True, help="Allow file:/ or the home folder itself.")
def claim(
    *,
    resources: tuple[str, ...],
    shared: bool,
    reason: str,
    ttl: float | None,
    wait: float,
    broad: bool,
) -> int:
    """Claim RES… as one set, all or nothing, for the session.

    Exit 0 when granted, 75 when held (also after --wait ran out).

    \b
    Examples:
      meshctl claim "$PWD"/src/auth.py --reason 'refactor auth'
      meshctl claim res:db --wait 300 --ttl 3600
    """
    return _claims_body.claim(
        get_state(),
        resources,
        shared=shared,
        reason=reason,
        ttl=ttl,
        wait=wait,
        broad=broad,
    )


# --- release --------------------------------------------------------------------------


@click.command(epilog=RES_HELP)
@common_options
@click.argument("resources", metavar="[RES…]", nargs=-1, shell_complete=complete_held)
def release(resources: tuple[str, ...]) -> None:
    """Release RES… (every claim of the session when none is named).

    Releasing what the session does not hold is not an error.

    \b
    Examples:
      meshctl release res:db
      meshctl release                  # every claim of the session
    """
    _claims_body.release(get_state(), resources)


# --- check ----------------------------------------------------------------------------


@click.command(epilog=RES_HELP)
@common_options
@click.argument(
    "resources", metavar="RES…|PATH", nargs=-1, required=True, shell_complete=complete_paths
)
@click.option(
    "--all-profiles",
    is_flag=True,
    help="Also ask the profiles whose daemons let this one see them.",
)
def check(resources: tuple[str, ...], all_profiles: bool) -> int:
    """Before editing: does another session claim RES, or work there?

    Exit 75 only when another session's claim overlaps; sessions that merely work
    in the place (and, with --all-profiles, claims in other profiles) are shown
    as a notice (exit 0).

    \b
    Examples:
      meshctl check "$PWD"/src/auth.py
      meshctl check res:db --json
    """
    return _claims_body.check(get_state(), resources, all_profiles)


# --- steal ----------------------------------------------------------------------------


@click.command(epilog=RES_HELP)
@common_options
@click.argument("resources", metavar="RES…", nargs=-1, required=True, shell_complete=complete_paths)
@click.option("--reason", required=True, metavar="R", help="Why (logged; told to the holders).")
@click.option("--shared", is_flag=True, help="Take it in shared mode.")
@click.option("--broad", is_flag=True, help="Allow file:/ or the home folder itself.")
def steal(resources: tuple[str, ...], reason: str, shared: bool, broad: bool) -> None:
    """Take RES… now: release the conflicting claims and grant them to the session.

    Bypasses the queue; logged, and the holders are told.

    \b
    Examples:
      meshctl steal res:db --reason 'holder is stuck since yesterday'
    """
    state = get_state()
    params = _claims.acquire_params(
        state.require_session(), list(resources), shared=shared, reason=reason, broad=broad
    )
    result = state.call(_claims.STEAL, params)
    if _claims_body.disabled(result):
        _output.emit(state.json, _claims.cli_document(result), None)
        return
    doc = _claims.cli_document(result)
    _output.emit(state.json, doc, lambda: _stolen(_output.clean(result)))


def _stolen(result: dict[str, Any]) -> str:
    """``stole res:x from cli:… (token 12)``: one line (the grant, and its "last holder
    did not release it cleanly" note, are the steal itself, said once)."""
    victims = result.get("stolen") or []
    if not victims:
        return _claims.granted_line(result)
    took = ", ".join(f"{v.get('resource')} from {v.get('session_id')}" for v in victims)
    token = _claims.token_of(result)
    free = [str(c.get("resource")) for c in _claims.claims_of(result)
            if c.get("resource") not in {v.get("resource") for v in victims}]  # fmt: skip
    also = f"; granted {', '.join(free)} (free)" if free else ""
    return f"stole {took}" + (f" (token {token})" if token is not None else "") + also


# --- validate -------------------------------------------------------------------------


@click.command(epilog=RES_HELP)
@common_options
@click.argument("resource", metavar="RES", shell_complete=complete_held)
@click.argument("token", metavar="TOKEN", type=Whole())
def validate(resource: str, token: int) -> int:
    """The fencing check: is TOKEN still the holder's token for RES?

    What guards a real resource (a database, a deploy) asks this before each write,
    with the token its claim was granted under. Exit 0 while it is; 75 once it is not
    (released, expired, stolen, lost, or never that key's): stop, and claim again.

    \b
    Examples:
      meshctl validate res:db 4097 && ./migrate-next-batch.sh
      meshctl validate "$PWD"/src 12 --json
    """
    state = get_state()
    result = state.call(_claims.VALIDATE, {"resource": resource, "token": token})
    valid = bool(result.get("valid"))
    _output.emit(state.json, result, lambda: _validated(_output.clean(result), token))
    return 0 if valid else _output.EXIT_TEMPFAIL


def _validated(result: dict[str, Any], token: int) -> str:
    """``valid: token 12 holds res:db (cli:…)`` or ``not valid: …``."""
    what = _claims.show_resource(str(result.get("resource", "")))
    if not result.get("valid"):
        return f"not valid: token {token} no longer holds {what} (or never did); claim it again"
    who = str(result.get("session_id") or "")
    if result.get("host"):
        who += f" on {result['host']}"
    return f"valid: token {token} holds {what}" + (f" ({who})" if who else "")


# --- log ------------------------------------------------------------------------------


@click.command(name="log")
@common_options
@_time.since_option("entries")
def log_(since: float | None) -> None:
    """The claims audit log, newest last: grants, releases, expiries, losses, steals.

    \b
    Examples:
      meshctl log
      meshctl log --since 1h --json
    """
    state = get_state()
    params: dict[str, Any] = {}
    if since is not None:
        params["since"] = _time.rfc3339(since)
    result = state.call(_claims.LOG, params or None)
    entries = list((result or {}).get("entries") or [])
    _output.emit(state.json, entries, lambda: render_log(_output.clean(entries)))


def render_log(entries: list[dict[str, Any]], home: str | None = None) -> str:
    """One line an entry: ``3m ago grant ~/project cli:… (token 12, exclusive) — reason``."""
    if not entries:
        return "No claim activity."
    lines = []
    for e in entries:
        what = _claims.show_resource(str(e.get("resource", "")), home)
        bits = []
        if e.get("token"):  # token 0: a row that names no claim (a rank, a pause)
            bits = [f"token {e.get('token')}"]
            if e.get("mode"):
                bits.append(str(e["mode"]))
        if e.get("how") and e.get("how") != e.get("action"):
            bits.append(str(e["how"]))
        if e.get("by"):
            bits.append(f"by {e['by']}")
        where = f" {what}" if what else ""
        line = f"{_time.ago(e.get('at'))} {e.get('action')}{where} {e.get('session_id')}"
        line += f" ({', '.join(bits)})" if bits else ""
        if e.get("reason"):
            line += f" — {e['reason']}"
        lines.append(line)
    return "\n".join(lines)
