"""``meshctl claim``, ``release``, ``check``, ``steal`` and ``log`` (SPEC §5, §9).

Keys are ``kind:value`` (``file:/abs/path``, ``port:8080``, ``branch:/repo:main`` …).
A bare path means ``file:PATH``. **Relative paths** -- bare, or after ``file:`` /
``repo:`` -- are resolved here against the current folder before sending, since
the daemon refuses relative keys; ``~`` is left for the daemon to expand.

Exit codes: ``claim`` 0 granted, 75 held (also when ``--wait`` ran out);
``check`` 75 only when another session's claim overlaps, 0 otherwise (sessions
merely working there are printed as a notice); ``steal`` 0 done. Human output is
the sentence a person needs ("held: cli:… is editing ~/project (branch feat/auth)
since 14:02 — refactor auth"); ``--json`` prints the daemon's answer in SPEC §9's
shape. When the mesh is disabled, ``claim`` and ``check`` succeed as no-ops and
say so on stderr.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from meshctl import _claims
from meshctl.cli import _output, _time
from meshctl.cli._context import State, common_options, complete_held, complete_paths, get_state
from meshctl.cli._params import Seconds

RES_HELP = (
    "RES is kind:value (file:/p, repo:/p, branch:/repo:NAME, port:N, res:NAME …); a bare "
    "path means file:PATH. Relative paths are resolved against the current folder."
)


def _disabled(result: Any) -> bool:
    if isinstance(result, dict) and result.get("disabled"):
        _output.note("the mesh is disabled (enabled = false in config); nothing was claimed")
        return True
    return False


def _timeout(state: State, wait: float) -> float:
    return _claims.wait_timeout(wait, state.mesh().timeout)


# --- claim ----------------------------------------------------------------------------


@click.command(epilog=RES_HELP)
@common_options
@click.argument("resources", metavar="RES…", nargs=-1, required=True, shell_complete=complete_paths)
@click.option("--shared", is_flag=True, help="Shared mode: many shared holders, no exclusive.")
@click.option("--reason", default="", metavar="R", help="Why (shown to whoever is held).")
@click.option("--ttl", type=Seconds(open_min=True), metavar="S", help="Free it after S s.")
@click.option(
    "--wait",
    type=Seconds(maximum=3600),
    default=0.0,
    metavar="S",
    help="Queue up to S seconds for the whole set (FIFO).",
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
      meshctl claim src/auth.py --reason 'refactor auth'
      meshctl claim res:db --wait 300 --ttl 3600
    """
    state = get_state()
    params = _claims.acquire_params(
        state.require_session(),
        _claims.resolve_all(resources),
        shared=shared,
        reason=reason,
        ttl=ttl,
        wait=wait,
        broad=broad,
    )
    result = acquire(state, params, wait)
    if _disabled(result):
        _output.emit(state.json, _claims.cli_document(result), None)
        return _output.EXIT_OK
    doc = _claims.cli_document(result)
    if doc["status"] == "granted":
        _output.emit(state.json, doc, lambda: _claims.granted_line(_output.clean(result)))
        return _output.EXIT_OK
    if not state.json:
        _with_branches(state, result.get("holders") or [])
    _output.emit(state.json, doc, lambda: _claims.held_lines(_output.clean(result)))
    return _output.EXIT_TEMPFAIL


def acquire(state: State, params: dict[str, Any], wait: float) -> dict[str, Any]:
    """``claim.acquire`` for ``claim``, ``run`` and ``job run``: while a wait runs, a
    terminal shows who holds what, the queue and the time left; a wait that ran out
    is said on stderr."""
    if wait <= 0 or not sys.stderr.isatty():
        result: dict[str, Any] = state.call(_claims.ACQUIRE, params, timeout=_timeout(state, wait))
        _ran_out(result, wait)
        return result
    from meshctl.cli._waiting import claim_detail, waiting

    what = "waiting for " + ", ".join(_claims.show_resource(r) for r in params["resources"])
    with waiting(what, wait, claim_detail(state.mesh(), params["session_id"], params["resources"])):
        result = state.call(_claims.ACQUIRE, params, timeout=_timeout(state, wait))
    _ran_out(result, wait)
    return result


def _ran_out(result: dict[str, Any], wait: float) -> None:
    """Say plainly that a wait ended without the grant (a deadlock refusal says itself)."""
    if wait > 0 and result.get("status") == "held" and not result.get("deadlock"):
        from meshctl.cli._waiting import ran_out

        ran_out(wait, "still held")


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
    state = get_state()
    params: dict[str, Any] = {"session_id": state.require_session()}
    if resources:
        params["resources"] = _claims.resolve_all(resources)
    result = state.call(_claims.RELEASE, params)
    released = _output.clean([str(r) for r in (result or {}).get("released") or []])
    _output.emit(
        state.json,
        result,
        lambda: f"released {', '.join(released)}" if released else "nothing to release",
    )


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
      meshctl check src/auth.py
      meshctl check res:db --json
    """
    state = get_state()
    keys = _claims.resolve_all(resources)
    params: dict[str, Any] = {"resources": keys}
    if state.session:
        params["session_id"] = state.session
    result = dict(state.call(_claims.CHECK, params) or {})
    if _disabled(result):
        _output.emit(state.json, result, None)
        return _output.EXIT_OK
    if all_profiles:
        result["elsewhere"] = [*(result.get("elsewhere") or []), *_elsewhere(state, keys)]
    if not state.json:
        _with_branches(state, result.get("claims") or [])
    _output.emit(
        state.json, result, lambda: render_check(_output.clean(keys), _output.clean(result))
    )
    return _output.EXIT_TEMPFAIL if result.get("status") == "held" else _output.EXIT_OK


#: Sessions merely working in the place are listed up to this many, then counted.
MAX_PRESENT = 5


def render_check(keys: list[str], result: dict[str, Any], home: str | None = None) -> str:
    """What ``check`` prints: one ``held`` line per conflicting session, then notices.

    A holder of several overlapping claims gets one line naming them; a session
    that holds claims is not listed again as merely present; present sessions are
    listed up to :data:`MAX_PRESENT`, the rest counted. The daemon's ``warnings``
    repeat the claims and present sessions as sentences, for clients without a
    renderer of their own; they are not printed again.
    """
    holders = _by_session(result.get("claims") or [])
    lines = [f"held: {_held_by(claims, home)}" for claims in holders.values()]
    present = [p for p in result.get("present") or [] if p.get("session_id") not in holders]
    lines += [f"notice: {_claims.present_line(p, home)}" for p in present[:MAX_PRESENT]]
    if len(present) > MAX_PRESENT:
        more = len(present) - MAX_PRESENT
        lines.append(f"notice: … and {more} more session(s) working there (--json lists them)")
    for c in result.get("elsewhere") or []:
        lines.append(f"notice: in profile {c.get('profile')}, {_claims.holder_line(c, home)}")
    if not lines:
        shown = ", ".join(_claims.show_resource(k, home) for k in keys)
        return f"free: no other session claims or works on {shown}"
    return "\n".join(lines)


def _by_session(claims: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Claims grouped by holding session, in the order the daemon gave them."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for claim in claims:
        groups.setdefault(str(claim.get("session_id") or "?"), []).append(claim)
    return groups


def _held_by(claims: list[dict[str, Any]], home: str | None, shown: int = 3) -> str:
    """One session's overlapping claims as one sentence (the first claim's, keys joined)."""
    if len(claims) == 1:
        return _claims.holder_line(claims[0], home)
    keys = [_claims.show_resource(str(c.get("resource") or ""), home) for c in claims]
    listed = ", ".join(keys[:shown]) + (
        f" and {len(keys) - shown} more" if len(keys) > shown else ""
    )
    reasons = {c.get("reason") for c in claims}
    first = {**claims[0], "reason": reasons.pop() if len(reasons) == 1 else ""}
    who = first.get("session_id") or "another session"
    return f"{who} holds {len(claims)} claims here: {listed}{_claims.holder_tail(first)}"


def _with_branches(state: State, holders: list[dict[str, Any]]) -> None:
    """Add each holder's branch (for "… (branch feat/auth) …"), from ``session.get``.

    Human output only, and only when something is held: one round trip per holder.
    """
    from meshd.protocol.errors import MeshError

    branches: dict[str, Any] = {}
    for holder in holders:
        sid = holder.get("session_id")
        if not sid or holder.get("branch") is not None:
            continue
        if holder.get("profile") not in (None, "", state.profile):
            continue
        if sid not in branches:
            try:
                branches[sid] = (state.call("session.get", {"session_id": sid}) or {}).get("branch")
            except MeshError:
                branches[sid] = None
        if branches[sid]:
            holder["branch"] = branches[sid]


def _elsewhere(state: State, keys: list[str]) -> list[dict[str, Any]]:
    """Claims on ``keys`` in the other profiles whose daemons let ours see them.

    As ``sessions active --all-profiles``: every other socket in the runtime folder
    is asked ``claim.check`` with ``for_profile``; one that does not list ours in
    ``visible_to_profiles`` answers ``visible: false`` and is left out; one that does
    not answer is skipped with a note. Never starts a daemon.
    """
    import os

    from meshctl import _paths, _spawn
    from meshctl._sync import Mesh
    from meshd.protocol.errors import MeshError

    seen = {os.path.realpath(_spawn.find_socket_str(state.profile, state.socket))}
    folder = _paths.runtime_dir_str()
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".sock"))
    except OSError:
        return []
    found: list[dict[str, Any]] = []
    for name in names:
        sock = os.path.join(folder, name)
        if os.path.realpath(sock) in seen:
            continue
        seen.add(os.path.realpath(sock))
        profile = name[: -len(".sock")]
        try:
            mesh = Mesh(profile, sock, autostart=False)
        except ValueError:
            continue  # not named like a profile: not one of our daemons
        try:
            other = mesh.call(_claims.CHECK, {"resources": keys, "for_profile": state.profile})
        except MeshError as exc:
            _output.note(f"skipped profile {profile} ({sock}): {exc.message}")
            continue
        finally:
            mesh.close()
        if not other or not other.get("visible", True) or other.get("profile") == state.profile:
            continue
        for holder in other.get("claims") or []:
            found.append({**holder, "profile": holder.get("profile") or other.get("profile")})
    return found


# --- steal ----------------------------------------------------------------------------


@click.command(epilog=RES_HELP)
@common_options
@click.argument("resources", metavar="RES…", nargs=-1, required=True, shell_complete=complete_paths)
@click.option("--reason", required=True, metavar="R", help="Why (logged; told to the holders).")
@click.option("--shared", is_flag=True, help="Take it in shared mode.")
def steal(resources: tuple[str, ...], reason: str, shared: bool) -> None:
    """Take RES… now: release the conflicting claims and grant them to the session.

    Bypasses the queue; logged, and the holders are told.

    \b
    Examples:
      meshctl steal res:db --reason 'holder is stuck since yesterday'
    """
    state = get_state()
    params = _claims.acquire_params(
        state.require_session(), _claims.resolve_all(resources), shared=shared, reason=reason
    )
    result = state.call(_claims.STEAL, params)
    if _disabled(result):
        _output.emit(state.json, _claims.cli_document(result), None)
        return
    doc = _claims.cli_document(result)
    _output.emit(state.json, doc, lambda: _stolen(_output.clean(result)))


def _stolen(result: dict[str, Any]) -> str:
    text = _claims.granted_line(result)
    for victim in result.get("stolen") or []:
        text += f"\nstole {victim.get('resource')} from {victim.get('session_id')}"
    return text


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
        bits = [f"token {e.get('token')}"] if e.get("token") is not None else []
        if e.get("mode"):
            bits.append(str(e["mode"]))
        if e.get("how") and e.get("how") != e.get("action"):
            bits.append(str(e["how"]))
        if e.get("by"):
            bits.append(f"by {e['by']}")
        line = f"{_time.ago(e.get('at'))} {e.get('action')} {what} {e.get('session_id')}"
        line += f" ({', '.join(bits)})" if bits else ""
        if e.get("reason"):
            line += f" — {e['reason']}"
        lines.append(line)
    return "\n".join(lines)
