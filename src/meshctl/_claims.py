"""Claims on the client side, without I/O: keys, params, and the words for a held claim.

Shared by the blocking library (``Session.claim``/``Session.check``) and the CLI
(``claim``, ``check``, ``steal``, ``run`` …), so both send the same params and say
the same sentence about the same holder (SPEC §5).

The method and param names of the claim domain live here, in one place: they
follow ``meshd.protocol.claims`` (the daemon's msgspec structs, the contract); if
that ever changes, this module is the one place to change.

Keys are sent exactly as typed: the daemon canonicalises them (``~``, ``.``/``..``,
symlinks) and refuses a relative path with ``BAD_KEY`` naming the key (SPEC §5). A
relative path is never resolved here; :func:`meant` only says which absolute key a
relative one would have meant, for the CLI's hint.

Standard library only.
"""

from __future__ import annotations

import os
import time

from meshd.protocol.contract import tilde

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
if TYPE_CHECKING:
    from typing import Any

ACQUIRE = "claim.acquire"
RELEASE = "claim.release"
CHECK = "claim.check"
STEAL = "claim.steal"
VALIDATE = "claim.validate"
LOG = "audit.log"

#: ``kind:`` prefixes: anything shaped like one is a key (the daemon judges the kind).
_KIND_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
#: Keys without a ``kind:`` prefix that are not paths (SPEC §5).
_BARE_KEYS = frozenset({"memory"})
_PATH_KINDS = ("file:", "repo:")


def meant(resource: str, cwd: str | None = None) -> str | None:
    """The absolute key a relative path key would mean from ``cwd`` (default: ours), or
    None when ``resource`` is no relative path (or ``cwd`` cannot be read).

    ``src/a.py`` -> ``/here/src/a.py``; ``file:rel`` -> ``file:/here/rel``; ``repo:.``
    -> ``repo:/here``; ``branch:repo:main`` -> ``branch:/here/repo:main``. Absolute
    paths, ``~`` paths, other kinds and the bare ``memory`` give None. Only a hint for
    a person: nothing is ever sent resolved (the daemon refuses relative keys).
    """
    text = resource
    for prefix in _PATH_KINDS:
        if text.startswith(prefix):
            return _meant(prefix, text[len(prefix) :], "", cwd)
    if text.startswith("branch:"):
        path, colon, name = text[len("branch:") :].rpartition(":")
        return _meant("branch:", path, colon + name, cwd) if colon else None
    if text in _BARE_KEYS or _kind(text):
        return None
    return _meant("", text, "", cwd)


def _kind(text: str) -> bool:
    """Whether ``text`` starts with a kind, ``^[A-Za-z][A-Za-z0-9_-]*:``, checked without
    a pattern (compiling one costs a hot command's start-up time)."""
    head, colon, _ = text.partition(":")
    first = head[:1]
    return bool(colon) and first.isascii() and first.isalpha() and _KIND_CHARS.issuperset(head)


def _meant(prefix: str, path: str, suffix: str, cwd: str | None) -> str | None:
    if not path or path.startswith(("/", "~")):
        return None
    try:
        base = cwd if cwd is not None else os.getcwd()
    except OSError:  # a deleted working folder: no absolute form to offer
        return None
    return prefix + os.path.normpath(os.path.join(base, path)) + suffix


def acquire_params(
    session_id: str,
    resources: Sequence[str],
    *,
    shared: bool = False,
    reason: str = "",
    ttl: float | None = None,
    wait: float = 0.0,
    broad: bool = False,
) -> dict[str, Any]:
    """``claim.acquire`` params (defaults left out, as the daemon's structs omit them)."""
    params: dict[str, Any] = {"session_id": session_id, "resources": list(resources)}
    if shared:
        params["mode"] = "shared"
    if reason:
        params["reason"] = reason
    if ttl is not None:
        params["ttl"] = ttl
    if wait:
        params["wait"] = wait
    if broad:
        params["broad"] = True
    return params


def wait_timeout(wait: float, base: float) -> float:
    """How long to wait for the reply of a call that may itself wait ``wait`` seconds."""
    return wait + base if wait else base


# --- reading results -------------------------------------------------------------


def claims_of(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The granted claims of an acquire/steal result, each ``{resource, mode, token, …}``."""
    return [dict(c) for c in result.get("claims") or []]


def acquired(result: Mapping[str, Any]) -> list[str]:
    """The resources this grant newly took: what a wrapper may release afterwards.

    Never one that was ``already_held`` (SPEC §5): the daemon marks those per claim
    (``already_held``), as a list (``held_before``), or for the whole set.
    """
    if result.get("status") != "granted" or result.get("disabled"):
        return []
    claims = claims_of(result)
    if result.get("already_held") and not any("already_held" in c for c in claims):
        before = set(result.get("held_before") or [c.get("resource") for c in claims])
    else:
        before = set(result.get("held_before") or [])
    return [
        str(c["resource"])
        for c in claims
        if not c.get("already_held") and c.get("resource") not in before
    ]


def token_of(result: Mapping[str, Any]) -> int | None:
    """The fencing token of a grant (one per set)."""
    token = result.get("token")
    if token is None:
        tokens = [c.get("token") for c in claims_of(result) if c.get("token") is not None]
        token = tokens[0] if tokens else None
    return None if token is None else int(token)


def cli_document(result: Mapping[str, Any]) -> dict[str, Any]:
    """SPEC §9's ``claim --json`` shape: status, claims, holders (more fields kept)."""
    doc = dict(result)
    doc["status"] = result.get("status", "granted" if result.get("disabled") else "held")
    doc["claims"] = [
        {"resource": c.get("resource"), "mode": c.get("mode"), "token": c.get("token"), **c}
        for c in claims_of(result)
    ]
    doc["holders"] = [
        {
            "session_id": h.get("session_id"),
            "resource": h.get("resource"),
            "task": h.get("task", ""),
            "since": h.get("since"),
            "reason": h.get("reason", ""),
            **h,
        }
        for h in result.get("holders") or []
    ]
    return doc


# --- the human sentence ------------------------------------------------------------


def show_resource(resource: str, home: str | None = None) -> str:
    """A key as people read it: ``file:/home/u/p`` -> ``~/p``; other kinds unchanged."""
    if resource.startswith("file:"):
        return tilde(resource[len("file:") :], home)
    if resource.startswith("repo:"):
        return "repo " + tilde(resource[len("repo:") :], home)
    return resource


def clock(since: Any, now: float | None = None) -> str:
    """An RFC 3339 (or epoch) time as local ``14:02``, with the date when not today."""
    ts = _epoch(since)
    if ts is None:
        return str(since) if since else "?"
    local = time.localtime(ts)
    today = time.localtime(now if now is not None else time.time())
    if local[:3] == today[:3]:
        return time.strftime("%H:%M", local)
    return time.strftime("%b %d %H:%M", local)


def _epoch(value: Any) -> float | None:
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str) or not value:
        return None
    import calendar

    text = value.strip().replace("z", "Z")
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ"):
        try:
            return calendar.timegm(time.strptime(text, fmt)) + _fraction(text)
        except ValueError:
            continue
    return None


def _fraction(text: str) -> float:
    if "." not in text:
        return 0.0
    digits = text.rsplit(".", 1)[1].rstrip("Z")
    return float("0." + digits) if digits.isdigit() else 0.0


def holder_line(
    holder: Mapping[str, Any], home: str | None = None, now: float | None = None
) -> str:
    """``cli:… is editing ~/project (branch feat/auth) since 14:02 — refactor auth``.

    The verb follows the key (editing a path, holding anything else, sharing a
    shared claim); the branch shows when the daemon reports the holder's; the text
    after the dash is the claim's reason, else the holder's task.
    """
    who = holder.get("session_id") or "another session"
    resource = str(holder.get("resource") or "")
    shown = show_resource(resource, home)
    if holder.get("mode") == "shared":
        verb = "is sharing"
    elif resource.startswith(("file:", "repo:")):
        verb = "is editing"
    else:
        verb = "holds"
    return f"{who} {verb} {shown}{holder_tail(holder, now)}"


def holder_tail(holder: Mapping[str, Any], now: float | None = None) -> str:
    """What follows the key in :func:`holder_line`: `` on h1 (branch b) since 14:02 — why``
    (the host when the claim is held on another host of the fleet)."""
    tail = f" on {host}" if (host := holder.get("host")) else ""
    if branch := holder.get("branch"):
        tail += f" (branch {branch})"
    if holder.get("since"):
        tail += f" since {clock(holder.get('since'), now)}"
    if what := (holder.get("reason") or holder.get("task")):
        tail += f" — {what}"
    return tail


_PRESENT = {
    "cwd": "is working in {path}",
    "repo": "is working in the repository {path}",
    "branch": "is on branch {branch} of {path}",
    "changed": "recently changed files under {path}",
}


def present_line(
    session: Mapping[str, Any], home: str | None = None, now: float | None = None
) -> str:
    """A live session working there without a claim: ``cli:… is working in ~/p — task``."""
    who = session.get("session_id") or "another session"
    path = tilde(str(session.get("path") or session.get("cwd") or ""), home)
    branch = session.get("branch")
    why = str(session.get("why") or "cwd")
    line = f"{who} " + _PRESENT.get(why, _PRESENT["cwd"]).format(path=path, branch=branch)
    if branch and why != "branch":
        line += f" (branch {branch})"
    if session.get("since"):
        line += f" since {clock(session.get('since'), now)}"
    if task := session.get("task"):
        line += f" — {task}"
    return line


def granted_line(result: Mapping[str, Any]) -> str:
    """``granted file:/x (token 12)``; several keys comma-separated; already-held and
    local-only (SPEC §12) marked."""
    claims = claims_of(result)
    keys = ", ".join(str(c.get("resource")) for c in claims) or "(nothing)"
    token = token_of(result)
    extra = [f"token {token}"] if token is not None else []
    new = set(acquired(result))
    if claims and not new:
        extra.append("already held")
    elif len(new) < len(claims):
        # a key held before keeps its own token (SPEC §5): say which, a fence needs it
        kept = [f"{c.get('resource')} keeps token {c.get('token')}" for c in claims
                if c.get("token") is not None and c.get("token") != token]  # fmt: skip
        extra.append("some already held" + (f": {', '.join(kept)}" if kept else ""))
    if any(c.get("mode") == "shared" for c in claims):
        extra.append("shared")
    if result.get("local_only") or any(c.get("local_only") for c in claims):
        extra.append("local-only")
    text = f"granted {keys}" + (f" ({', '.join(extra)})" if extra else "")
    if "local-only" in extra:
        text += (
            "\nnote: the fleet cannot be reached: granted on this host alone "
            '(on_partition = "local"); reconciled with the fleet when the link returns'
        )
    for prev in previous_of(result):
        text += (
            f"\nnote: the last holder of {prev.get('resource')}, {prev.get('session_id')}, "
            f"did not release it cleanly ({prev.get('how')} at {clock(prev.get('at'))})"
        )
    return text


def previous_of(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Unclean ends of the last holders (per claim, and the set's), each once."""
    found: list[dict[str, Any]] = []
    for prev in [*(c.get("previous") for c in claims_of(result)), result.get("previous")]:
        if isinstance(prev, dict) and prev not in found:
            found.append(dict(prev))
    return found


def held_lines(result: Mapping[str, Any], home: str | None = None) -> str:
    """``held: …`` one line a holder (or a note on the queue and deadlock)."""
    holders = list(result.get("holders") or [])
    lines = [f"held: {holder_line(h, home)}" for h in holders]
    if result.get("deadlock"):
        lines.append("held: waiting would close a cycle of waiters (deadlock); not queued")
    if not lines:
        ahead = len(result.get("ahead") or [])
        more = "more than " if result.get("more_ahead") else ""
        queued = f"held: {more}{ahead} earlier waiter(s) are queued for it"
        lines.append(queued if ahead else "held")
    return "\n".join(lines)
