"""Session ids as people type them: a unique prefix, the part after ``kind:``, a typo.

Ids are long (``cli:20261201-1a8041``) and typed by hand. Wherever a command takes
one, a unique prefix of it is enough (``cli:2026120``), and so is the part after its
kind, or a prefix of that (``20261201-1a``): ``cli:20261201-1a8041`` is the one live
session it names. Resolved in one place, on the error path only: the command sends
what was typed, and when the daemon answers ``UNKNOWN_SESSION`` for a string the
command sent, :func:`resolve` reads the live sessions once (``session.list``), and

* one match: the command's call is sent again with the full id (and the invocation
  remembers it, so its later calls send the full id at once);
* several: ``UNKNOWN_SESSION`` that names them (``matches``), nothing sent again;
* none: ``UNKNOWN_SESSION`` that names the closest id, if one is close
  (``did you mean …?``, ``data.did_you_mean``).

So an exact id costs nothing more than before (no extra round trip, nothing
imported), and ``difflib`` is imported only to suggest. Standard library only: the
hot commands' fast path shares :class:`~meshctl.cli._state.State` and this with
click's commands.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

    from meshd.protocol.errors import MeshError

#: How many matches an ambiguous prefix names.
SHOWN = 5


#: The params that name a session (protocol fields typed ``SessionId``, and ``parent``):
#: only these are resolved and replaced, never a message's text that looks like an id.
ID_FIELDS = frozenset({"session_id", "to", "author", "parent"})


def typed(params: Any, value: str) -> bool:
    """Whether ``value`` is what the command sent as a session id in ``params``."""
    if isinstance(params, dict):
        return any((k in ID_FIELDS and v == value) or typed(v, value) for k, v in params.items())
    if isinstance(params, list | tuple):
        return any(typed(v, value) for v in params)
    return False


def substitute(params: Any, aliases: dict[str, str]) -> Any:
    """``params`` with each session id that is a key of ``aliases`` replaced by its value."""
    if isinstance(params, dict):
        return {
            k: aliases.get(v, v)
            if k in ID_FIELDS and isinstance(v, str)
            else substitute(v, aliases)
            for k, v in params.items()
        }
    if isinstance(params, list):
        return [substitute(v, aliases) for v in params]
    return params


def matches(text: str, ids: Iterable[str]) -> list[str]:
    """The ids ``text`` is a prefix of, or a prefix of the part after their kind."""
    return [
        sid
        for sid in ids
        if sid.startswith(text) or (":" in sid and sid.split(":", 1)[1].startswith(text))
    ]


def closest(text: str, ids: Iterable[str]) -> str | None:
    """The id most like ``text`` (a typo of a whole id, or of its part after the kind)."""
    import difflib

    best, score = None, 0.0
    for sid in ids:
        for form in {sid, sid.split(":", 1)[-1]}:
            ratio = difflib.SequenceMatcher(None, text, form).ratio()
            if ratio > score:
                best, score = sid, ratio
    return best if score >= 0.6 else None


def closest_text(text: str, names: Iterable[str]) -> str | None:
    """The name most like ``text`` (a key, a job), if one is close enough to suggest."""
    import difflib

    found = difflib.get_close_matches(text, list(names), n=1, cutoff=0.6)
    return found[0] if found else None


def check_live(state: Any, sid: str) -> str:
    """The full id of live session ``sid`` as typed (exact, a prefix, the part after its
    kind), or ``UNKNOWN_SESSION`` naming the matches or the closest: for the commands
    whose daemon call would take an unknown id silently (``register --parent``,
    ``handoff write --to``). One ``session.get`` when the id is exact."""
    return str(named(state, sid).get("session_id") or sid)


def named(state: Any, sid: str) -> Any:
    """``session.get`` of ``sid``, a session the command names but does not act for: if
    it ended, the error says so (``data.caller`` false) instead of telling the caller
    to register again, as it would for the caller's own session."""
    from meshd.protocol.errors import SessionExpired

    try:
        return state.call("session.get", {"session_id": sid})
    except SessionExpired as exc:
        exc.message = f"session {exc.data.get('session_id', sid)} {exc.data.get('reason', 'ended')}"
        exc.data["caller"] = False
        raise


def resolve(error: MeshError, params: Any, live: Callable[[], list[str]]) -> str | None:
    """The full id an ``UNKNOWN_SESSION`` ``error`` for a typed id stands for; None when
    the unknown id is not one the command sent (nothing to resolve). Raises the error
    again, naming the matches (several) or the closest id (none)."""
    unknown = error.data.get("session_id")
    if not isinstance(unknown, str) or not unknown or not typed(params, unknown):
        return None
    ids = live()
    found = matches(unknown, ids)
    if len(found) == 1:
        return found[0]
    if found:
        shown = ", ".join(found[:SHOWN]) + (
            f" (+{len(found) - SHOWN} more)" if len(found) > SHOWN else ""
        )
        error.message = f"session id {unknown} is ambiguous: it matches {shown}; give more of it"
        error.data["matches"] = found
        raise error
    guess = closest(unknown, ids)
    if guess is not None:
        error.message = f"{error.message}; did you mean {guess}?"
        error.data["did_you_mean"] = guess
    raise error
