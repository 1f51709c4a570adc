"""The bodies of ``meshctl claim``, ``release`` and ``check``, without click.

The click commands in :mod:`meshctl.cli.claims` parse their options and call these;
the fast path (:mod:`meshctl.cli._fast`) parses the same command lines without
click and calls the same functions, so both print the same bytes and exit with the
same code. Help texts and options stay with the click commands.

Standard library only (a test checks that the hot commands never load click).
"""

from __future__ import annotations

import sys

from meshctl import _claims
from meshctl.cli import _output
from meshd.protocol import errors as E

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from typing import Any

    from meshctl.cli._state import State

#: ``claim --ttl`` and ``--wait``: the ranges of their ``Seconds`` (the fast path checks
#: the same ones before it takes a command line; anything else goes to click). A wait
#: longer than the daemon's ``max_query_timeout`` is capped by the daemon, never refused
#: (SPEC §2), so ``--wait`` has no maximum of its own beyond ``Seconds``'.
TTL_RANGE: dict[str, Any] = {"open_min": True}
WAIT_RANGE: dict[str, Any] = {}


def disabled(result: Any, done: str = "nothing was claimed") -> bool:
    """Say so on stderr when the mesh is switched off (the command then succeeds)."""
    if isinstance(result, dict) and result.get("disabled"):
        _output.note(f"the mesh is disabled (enabled = false in config); {done}")
        return True
    return False


def _timeout(state: State, wait: float) -> float:
    """How long the reply of a wait of ``wait`` s may take: the daemon waits at most its
    ``max_query_timeout``."""
    mesh = state.mesh()
    return _claims.wait_timeout(min(wait, mesh.query_cap()) if wait > 0 else 0.0, mesh.timeout)


# --- claim ----------------------------------------------------------------------------


def claim(
    state: State,
    resources: tuple[str, ...],
    *,
    shared: bool,
    reason: str,
    ttl: float | None,
    wait: float,
    broad: bool,
) -> int:
    """``meshctl claim``: exit 0 when granted, 75 when held (also after --wait ran out)."""
    params = _claims.acquire_params(
        state.require_session(),
        list(resources),
        shared=shared,
        reason=reason,
        ttl=ttl,
        wait=wait,
        broad=broad,
    )
    result = acquire(state, params, wait)
    if disabled(result):
        _output.emit(state.json, _claims.cli_document(result), None)
        return _output.EXIT_OK
    if not state.json:
        told_lost(result)
    doc = _claims.cli_document(result)
    if doc["status"] == "granted":
        _output.emit(state.json, doc, lambda: _claims.granted_line(_output.clean(result)))
        return _output.EXIT_OK
    if not state.json:
        with_branches(state, result.get("holders") or [])
    _output.emit(state.json, doc, lambda: _claims.held_lines(_output.clean(result)))
    return _output.EXIT_TEMPFAIL


def told_lost(result: dict[str, Any]) -> None:
    """Say on stderr the claims the session lost meanwhile (ttl, steal, expiry) whose
    notice it has not read: SPEC §5, a holder that was not listening learns it at its
    next claim. Said again at each claim until ``meshctl inbox`` reads the notice."""
    for loss in result.get("lost") or []:
        text = _output.clean(str(loss.get("text") or ""))
        _output.note(f"{text} (notice #{loss.get('id')}, unread: meshctl inbox)")


def acquire(
    state: State, params: dict[str, Any], wait: float, *, say: bool = True, asks_again: bool = False
) -> dict[str, Any]:
    """``claim.acquire`` for ``claim``, ``run`` and ``job run``: while a wait runs, a
    terminal shows who holds what, the queue and the time left (up to the daemon's cap
    on one wait, unless ``asks_again``: the caller asks again until ``wait`` is over); a
    wait that ran out is said on stderr (unless ``say`` is false: the caller says it). A
    daemon that goes away during the wait is said as such
    (:func:`meshctl.cli._output.went_away`)."""
    try:
        if wait <= 0 or not sys.stderr.isatty():
            result: dict[str, Any] = state.call(
                _claims.ACQUIRE, params, timeout=_timeout(state, wait)
            )
        else:
            from meshctl.cli._waiting import claim_detail, waiting

            what = "waiting for " + ", ".join(_claims.show_resource(r) for r in params["resources"])
            detail = claim_detail(state.mesh(), params["session_id"], params["resources"])
            shown = wait if asks_again else min(wait, state.mesh().query_cap())
            with waiting(what, shown, detail):
                result = state.call(_claims.ACQUIRE, params, timeout=_timeout(state, wait))
    except E.MeshUnavailable as exc:
        if wait <= 0 or isinstance(exc, E.StorageUnavailable) or not state.reached():
            raise
        raise _output.went_away(exc, "this claim waited", "the claim was not granted") from exc
    if say:
        _ran_out(result, wait)
    return result


def acquire_for(state: State, params: dict[str, Any], wait: float) -> dict[str, Any]:
    """``claim.acquire`` that waits up to ``wait`` in all (a job's ``timeout``, SPEC §7):
    the daemon caps each wait at ``max_query_timeout`` (§2), so a wait that ran out
    while time is left is asked again, at the back of the queue, as ``job wait`` asks
    ``job.wait`` again. A wait withdrawn or refused as a deadlock is not asked again."""
    import time

    start = time.monotonic()
    while True:
        left = max(wait - (time.monotonic() - start), 0.0)
        result = acquire(state, {**params, "wait": left}, left, say=False, asks_again=True)
        if (
            result.get("status") != "held"
            or result.get("deadlock")
            or result.get("withdrawn")
            or not (result.get("holders") or result.get("ahead"))
            or time.monotonic() - start >= wait - 0.05
        ):
            break
    if wait > 0:
        result["waited_s"] = round(time.monotonic() - start, 3)
        _ran_out(result, wait)
    return result


def _ran_out(result: dict[str, Any], wait: float) -> None:
    """Say plainly that a wait ended without the grant (a deadlock refusal says itself)."""
    if wait > 0 and result.get("status") == "held" and not result.get("deadlock"):
        from meshctl.cli._output import note
        from meshctl.cli._waiting import ran_out

        why = result.get("withdrawn")  # a pause withdraws with holders: they cannot tell
        if why or (not result.get("holders") and not result.get("ahead")):  # not run out
            waited = result.get("waited_s", 0)
            what = "its session paused" if why == "paused" else "its session ended or paused"
            note(f"the wait was withdrawn after {waited:g} s: {what}")
            return
        ran_out(wait, "still held", result.get("waited_s"))


# --- release --------------------------------------------------------------------------


def release(state: State, resources: tuple[str, ...]) -> None:
    """``meshctl release``: what the session does not hold is not an error."""
    params: dict[str, Any] = {"session_id": state.require_session()}
    if resources:
        params["resources"] = list(resources)
    result = state.call(_claims.RELEASE, params)
    released = _output.clean([str(r) for r in (result or {}).get("released") or []])
    _output.emit(
        state.json,
        result,
        lambda: f"released {', '.join(released)}" if released else "nothing to release",
    )


# --- check ----------------------------------------------------------------------------


def check(state: State, resources: tuple[str, ...], all_profiles: bool) -> int:
    """``meshctl check``: exit 75 only when another session's claim overlaps."""
    keys = list(resources)
    params: dict[str, Any] = {"resources": keys}
    if state.session:
        params["session_id"] = state.session
    result = dict(state.call(_claims.CHECK, params) or {})
    if disabled(result, "no claim was checked"):
        _output.emit(state.json, result, None)
        return _output.EXIT_OK
    if all_profiles:
        result["elsewhere"] = [*(result.get("elsewhere") or []), *_elsewhere(state, keys)]
    if not state.json:
        with_branches(state, result.get("claims") or [])
    _output.emit(
        state.json, result, lambda: render_check(_output.clean(keys), _output.clean(result))
    )
    return _output.EXIT_TEMPFAIL if result.get("status") == "held" else _output.EXIT_OK


#: Sessions merely working in the place are listed up to this many, then counted.
MAX_PRESENT = 5


def render_check(keys: list[str], result: dict[str, Any], home: str | None = None) -> str:
    """What ``check`` prints: one ``held`` line per conflicting session (or one ``free``
    line), then notices.

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
    unread = result.get("fleet_unreachable")
    if unread:  # the other hosts' claims are unknown: never a plain "free"
        lines.append(
            f"warning: the other hosts' claims could not be read: {unread}; "
            "`meshctl fleet status` says why"
        )
    if not holders:  # free: said first, also when sessions work there (the notices)
        shown = ", ".join(_claims.show_resource(k, home) for k in keys)
        what = "claims" if lines else "claims or works on"
        who = "no session of this host" if unread else "no other session"
        lines.insert(0, f"free: {who} {what} {shown}")
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


def with_branches(state: State, holders: list[dict[str, Any]]) -> None:
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
