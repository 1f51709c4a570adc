"""The body of ``meshctl sessions active`` and its rendering, without click.

The click command in :mod:`meshctl.cli.sessions` parses its options and calls
:func:`active`; the fast path (:mod:`meshctl.cli._fast`) parses the same command
lines without click and calls it too, so both print the same bytes. The rules of
the listing are in :mod:`meshctl.cli.sessions`' docstring.

Standard library only (a test checks that the hot commands never load click).
"""

from __future__ import annotations

from meshctl.cli import _output, _time
from meshd.protocol.errors import MeshError, MeshUnavailable

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from pathlib import Path  # imported when --all-profiles needs it (start-up cost)
    from typing import Any

    from meshctl.cli._state import State


def describe(session: Mapping[str, Any], home: str | None = None, *, host: bool = False) -> str:
    """One session as one line of ``sessions active`` (see the module docstring);
    ``host``: say which host it runs on (a listing that spans a fleet's hosts)."""
    task = session.get("task") or ""
    status = session.get("status") or "idle"
    parts: list[str] = []
    if status == "waiting-for-user":
        parts.append(f"waiting for user, last task: {task}" if task else "waiting for user")
    else:
        parts.append(task or "no task")
    if host and session.get("host"):
        parts.append(f"on {session['host']}")
    if cwd := _output.tilde(session.get("cwd"), home):
        parts.append(f"in {cwd}")
    if branch := session.get("branch"):
        parts.append(f"branch {branch}")
    if status != "waiting-for-user":
        activity = session.get("activity")
        parts.append(f"status: {status} ({activity})" if activity else f"status: {status}")
    if rank := ranked(session):
        parts.append(rank)
    if session.get("liveness") == "process" and "idle_s" in session:
        parts.append(f"idle {_time.age(float(session.get('idle_s') or 0))}")
    else:
        parts.append(f"{_time.age(float(session.get('age_s') or 0))} ago")
    line = f"- {session.get('session_id', '?')}{sourced(session)} — {', '.join(parts)}"
    return f"{line}  [stale]" if session.get("stale") else line


def sourced(session: Mapping[str, Any]) -> str:
    """`` (gateway:telegram)`` after an id that does not already say its source.

    Ids the mesh makes (``cli:20261129-1f3a9c``) and most chosen ones
    (``gateway:telegram:home``) start with their source; a Hermes session's id is
    Hermes's own (``20261201_101010_ab12cd``), so a CLI and a gateway chat looked
    alike. The source is added only where the id does not say it."""
    sid, source = str(session.get("session_id") or ""), str(session.get("source") or "")
    if not source or sid == source or sid.startswith(source + ":"):
        return ""
    return f" ({source})"


def ranked(session: Mapping[str, Any]) -> str:
    """``rank 5 (set by ana 3m ago)`` for a session a person ranked; "" at rank 0."""
    rank = int(session.get("rank") or 0)
    if not rank and not session.get("rank_by"):
        return ""
    by, at = session.get("rank_by"), session.get("rank_at")
    when = _time.ago(at) if _time.epoch(at) is not None else ""
    how = " ".join(x for x in (f"by {by}" if by else "", when) if x)
    return f"rank {rank} (set {how})" if how else f"rank {rank}"


def render_list(
    profile: str, sessions: Iterable[Mapping[str, Any]], home: str | None = None
) -> str:
    """The human listing of one profile's sessions (header, then one line each)."""
    items = list(sessions)
    if not items:
        return f"No active sessions (profile {profile})."
    lines = [f"Active sessions (profile {profile}):"]
    hosts = len({s.get("host") for s in items}) > 1  # a fleet: every line says where
    lines.extend(describe(s, home, host=hosts) for s in items)
    return "\n".join(lines)


def _with_profile(result: Mapping[str, Any], fresh: bool) -> list[dict[str, Any]]:
    profile = result.get("profile")
    out = []
    for raw in result.get("sessions") or []:
        if fresh and raw.get("stale"):
            continue
        session = dict(raw)
        session.setdefault("profile", profile)
        out.append(session)
    return out


def _runtime_sockets() -> list[Path]:
    """Sockets of the profiles' daemons in the runtime folder (``<runtime>/meshd/*.sock``)."""
    from meshctl import _paths

    folder = _paths.runtime_dir()
    try:
        return sorted(folder.glob("*.sock"))
    except OSError:
        return []


def _other_profiles(
    state: State, own_socket: Path | None, fresh: bool
) -> list[tuple[str, list[dict[str, Any]]]]:
    """Ask every other daemon in the runtime folder what it shows ``state.profile``.

    Never starts a daemon. A socket that does not answer is skipped with a note
    on stderr; a profile that does not list ours in ``visible_to_profiles``
    answers ``visible: false`` and is left out silently.
    """
    from meshctl._sync import Mesh

    seen = {own_socket.resolve()} if own_socket else set()
    found: list[tuple[str, list[dict[str, Any]]]] = []
    for sock in _runtime_sockets():
        if sock.resolve() in seen:
            continue
        seen.add(sock.resolve())
        try:
            mesh = Mesh(sock.stem, sock, autostart=False)
        except ValueError:
            continue  # not named like a profile: not one of our daemons
        try:
            result = mesh.call("session.list", {"for_profile": state.profile, "fresh": fresh})
        except MeshError as exc:
            _output.note(f"skipped profile {sock.stem} ({sock}): {exc.message}")
            continue
        finally:
            mesh.close()
        if not result.get("visible", True) or result.get("profile") == state.profile:
            continue
        found.append((str(result.get("profile", sock.stem)), _with_profile(result, fresh)))
    return found


def active(state: State, *, all_profiles: bool, fresh: bool, local: bool) -> None:
    """``meshctl sessions active``: the live sessions, for people or as JSON."""
    params = {k: True for k, on in (("fresh", fresh), ("local", local)) if on}
    result = state.call("session.list", params or None)
    groups = [(str(result.get("profile") or state.profile), _with_profile(result, fresh))]
    if all_profiles:
        groups.extend(_other_profiles(state, _own_socket(state), fresh))
    flat = [s for _, group in groups for s in group]
    _output.emit(
        state.json, flat, lambda: "\n".join(render_list(p, _output.clean(g)) for p, g in groups)
    )


def _own_socket(state: State) -> Path | None:
    from meshctl import _spawn

    try:
        return _spawn.find_socket(state.profile, state.socket)
    except (MeshUnavailable, OSError):
        return None
