"""``session.list`` on the wire: each session's encoded form, kept until it changes.

Listing 10 sessions cost the daemon about 40 µs of CPU against 7.5 µs for a
heartbeat, nearly all of it building a 31-field :class:`~meshd.protocol.methods.SessionInfo`
per session (the encode itself was a tenth). Most of those fields change only when
the session does; five move with the clock or with the claim table (``age_s``,
``stale``, ``claims``, ``claims_total``, ``idle_s``). So each session is encoded once,
with a marker in place of each of the five, and kept as the six byte segments
between them; a listing joins the kept segments with the five, freshly encoded. The
bytes are exactly what encoding the ``SessionInfo`` gives (a test holds them equal).

When is a kept form stale? Not by invalidating it at each place that changes a
session -- a place forgotten, now or later, would list an old field for ever -- but
by comparison: the entry keeps every field of the :class:`Session` it was encoded
from (one C call, ``msgspec.structs.astuple``) and is encoded again when any differs.
A heartbeat moves ``last_heartbeat``, so it costs the next listing one encode of that
session, as before. Entries of ended sessions go with the next listing.

The two durations are rounded to the millisecond by :func:`ms`, which gives exactly
``round(x, 3)`` at a third of its cost: ``round`` with digits goes through a decimal
conversion, and two of them per session were a third of a listing's CPU.

Memory: an entry is about 1 KB. Only registries of up to :data:`CACHED_UP_TO`
sessions keep them (1 MB at most); a larger one is encoded afresh on each listing,
as before, so the memory per session stays what the registry alone costs.
"""

from __future__ import annotations

import math
from typing import Any, cast

import msgspec

from meshd.core.claims.records import Claim
from meshd.core.sessions.records import Session
from meshd.protocol import methods as m
from meshd.protocol.contract import rfc3339

CACHED_UP_TO = 1000
"""Registries larger than this list without keeping encoded sessions (see above)."""

_MARK = b"\x00"
"""Stands for a field filled in per listing: compact JSON never holds a raw NUL
(msgspec escapes control characters inside strings), so splitting on it is exact."""
_RAW_MARK = cast(Any, msgspec.Raw(_MARK))
_encode = msgspec.json.Encoder().encode
_TRUE, _FALSE, _EMPTY, _ZERO = b"true", b"false", b"[]", b"0"


def ms(x: float) -> float:
    """``round(max(0.0, x), 3)``, exactly (listings must not depend on which is used).

    ``round`` gives the double nearest the decimal ``n / 1000``, ``n`` being ``x * 1000``
    rounded half to even. ``x * 1000.0`` is within half a unit in the last place of the
    exact product, so its floor and fraction settle ``n`` except within that of a half:
    those (and values too large for the margin) go to ``round`` itself. ``n / 1000.0``
    is a correctly rounded division: the same nearest double.
    """
    if x <= 0.0:
        return 0.0
    y = x * 1000.0
    if y >= 1e12:  # 31 years: the margin below no longer covers the product's error
        return round(x, 3)
    f = math.floor(y)
    d = y - f
    if 0.4999 < d < 0.5001:
        return round(x, 3)
    return (f + 1 if d > 0.5 else f) / 1000.0


def claim_infos(
    held: tuple[Claim, ...] | list[Claim], local_only: set[tuple[str, str]] | None = None
) -> list[m.ClaimInfo]:
    """Claims as listings show them; ``local_only``: the (session, resource) pairs
    granted while the fleet was out of reach (SPEC §12)."""
    return [
        m.ClaimInfo(
            resource=c.resource, mode=c.mode, token=c.token, since=rfc3339(c.since),
            reason=c.reason,
            local_only=local_only is not None and (c.session_id, c.resource) in local_only,
        )
        for c in held
    ]  # fmt: skip


def session_info(
    s: Session,
    host: str,
    *,
    age_s: Any = _RAW_MARK,
    stale: Any = _RAW_MARK,
    claims: Any = _RAW_MARK,
    claims_total: Any = _RAW_MARK,
    idle_s: Any = _RAW_MARK,
) -> m.SessionInfo:
    """``s`` as listings show it; the five fields that move per listing are markers
    unless given (``session.get`` and the fleet's mirror give them)."""
    return m.SessionInfo(
        session_id=s.session_id, profile=s.profile, source=s.source, status=s.status,
        task=s.task, cwd=s.cwd, repo=s.repo, branch=s.branch, pid=s.pid, host=host,
        last_heartbeat=rfc3339(s.last_heartbeat), age_s=age_s, stale=stale,
        liveness=s.liveness, claims=claims, claims_total=claims_total,
        model=s.model, provider=s.provider, worktree=s.worktree, tools=list(s.tools),
        parent=s.parent, slot=s.slot, kanban_task=s.kanban_task,
        started_at=rfc3339(s.started_at), last_activity=rfc3339(s.last_activity),
        accept_queries=s.accept_queries, accept_messages=s.accept_messages,
        rank=s.rank, rank_by=s.rank_by,
        rank_at=None if s.rank_at is None else rfc3339(s.rank_at),
        activity=s.activity, idle_s=idle_s,
    )  # fmt: skip


def segments(s: Session, host: str) -> list[bytes]:
    """The six byte segments of ``s``'s encoded form around its five moving fields."""
    parts = _encode(session_info(s, host)).split(_MARK)
    assert len(parts) == 6, parts
    return parts


_Kept = tuple[tuple[Any, ...], str, list[bytes]]
"""A kept form: every field of the session it was encoded from, the host shown, the
six segments."""


class Listing:
    """Encodes ``session.list`` results, keeping each session's segments until it changes."""

    def __init__(self) -> None:
        self._kept: dict[str, _Kept] = {}

    def encode(
        self,
        profile: str,
        sessions: list[tuple[Session, bool, tuple[Claim, ...]]],
        now_wall: float,
        host: str | None = None,
        more: list[m.SessionInfo] | None = None,
        *,
        local_only: set[tuple[str, str]] | None = None,
    ) -> msgspec.Raw:
        """The encoded :class:`~meshd.protocol.methods.ListResult` of ``sessions``, each
        given as (session, stale, its claims); ``host`` overrides every session's own
        (a fleet lists this host's name); ``more`` are appended as they are;
        ``local_only``: the (session, resource) pairs granted while the fleet was out of
        reach, marked so (SPEC §12)."""
        old = self._kept
        keep = len(sessions) <= CACHED_UP_TO
        kept: dict[str, _Kept] = {}
        astuple = msgspec.structs.astuple
        out = [_HEAD, _encode(profile), _MIDDLE]
        first = True
        for s, stale, held in sessions:
            shown = s.host if host is None else host
            fields = astuple(s)
            entry = old.get(s.session_id)
            if entry is None or entry[0] != fields or entry[1] != shown:
                entry = (fields, shown, segments(s, shown))
            if keep:
                kept[s.session_id] = entry
            p = entry[2]
            if held:
                claims = _encode(claim_infos(held[: m.LISTED_CLAIMS], local_only))
                total = str(len(held)).encode()
            else:
                claims, total = _EMPTY, _ZERO
            age = _encode(ms(now_wall - s.last_heartbeat))
            idle = _encode(ms(now_wall - s.last_activity))
            if not first:
                out.append(b",")
            first = False
            out += (
                p[0], age, p[1], _TRUE if stale else _FALSE, p[2], claims, p[3], total,
                p[4], idle, p[5],
            )  # fmt: skip
        for info in more or ():
            if not first:
                out.append(b",")
            first = False
            out.append(_encode(info))
        out.append(_TAIL)
        self._kept = kept
        return msgspec.Raw(b"".join(out))


def _envelope() -> tuple[bytes, bytes, bytes]:
    """ListResult's bytes before the profile, between it and the sessions, and after."""
    text = _encode(m.ListResult(profile=_RAW_MARK, sessions=[_RAW_MARK]))
    head, middle, tail = text.split(_MARK)
    return head, middle, tail


_HEAD, _MIDDLE, _TAIL = _envelope()
