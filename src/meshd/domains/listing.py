"""``session.list`` on the wire: each session's encoded form, kept until it changes.

Most of a session's 31 listed fields change only when the session does; five move
with the clock or with the claim table (``age_s``, ``stale``, ``claims``,
``claims_total``, ``idle_s``). So each session is encoded once, with a marker in place
of each of the five, and kept as the six byte segments between them. The listing
itself is kept too, as a template: the sessions' segments joined with their
staleness and claims, a ``%b`` where each duration goes. While no session, staleness
or claim list changed, a listing is the template filled with the durations
(:func:`durations`, a few C calls) -- the per-session Python work is gone from it.
The bytes are exactly what encoding the ``SessionInfo`` gives (a test holds them equal).

When is a kept form stale? Not by invalidating it at each place that changes a
session -- a place forgotten, now or later, would list an old field for ever -- but
by comparison: the entry keeps a copy of the :class:`Session` it was encoded from,
compared field by field (in C) with the live one at every listing. A session that
differs is looked at in Python: if only what a plain heartbeat moves differs
(``last_hb_mono``, and ``last_heartbeat`` within the second it is shown to,
:func:`_shown`), its segments stay; anything else encodes it again. Entries of ended
sessions go with the next change.

The two durations are rounded to the millisecond: exactly ``round(x, 3)``, as
:func:`ms` computes one; :func:`durations` writes them all with one ``%.3f`` format.

Memory: an entry is about 1 KB. Only registries of up to :data:`CACHED_UP_TO`
sessions keep them (1 MB at most); a larger one is encoded afresh on each listing,
as before, so the memory per session stays what the registry alone costs.
"""

from __future__ import annotations

import itertools
import math
import operator
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


_Kept = tuple[Session, str, list[bytes], tuple[Any, ...]]
"""A kept form: a copy of the session it was encoded from, the host shown, the six
segments, and :func:`_shown` of the copy's fields."""

_FIELDS = Session.__struct_fields__
_BEAT = _FIELDS.index("last_heartbeat")
_BEAT_MONO = _FIELDS.index("last_hb_mono")
assert _BEAT < _BEAT_MONO
_TIMES = operator.attrgetter("last_heartbeat", "last_activity")
_DURATION = b"%b"
"""Where a duration goes in a listing's template (:meth:`Listing.encode`)."""


def _shown(s: Session) -> tuple[Any, ...]:
    """``s``'s fields as far as its kept form shows them: what a plain heartbeat moves
    -- ``last_hb_mono`` (not shown) and ``last_heartbeat`` within its second (shown to
    the second; its age is filled in per listing) -- taken out."""
    f = msgspec.structs.astuple(s)
    return (*f[:_BEAT], int(f[_BEAT]), *f[_BEAT + 1 : _BEAT_MONO], *f[_BEAT_MONO + 1 :])


def durations(times: tuple[float, ...], now_wall: float) -> tuple[bytes, ...]:
    """``_encode(ms(now_wall - t))`` of each of ``times``, in a few C calls instead of two
    Python calls each (they were half of a listing's CPU).

    ``b"%.3f" % x`` holds the digits of ``round(x, 3)`` (both round the exact value of
    ``x`` at the third decimal, half to even), and the encoder writes that float as
    its shortest text: the same digits without trailing zeros, one kept after the point
    (``5.120`` is ``5.12``, ``3.000`` is ``3.0``). For ``0 < x < 1e9`` (31 years) both
    are plain decimals (tests/protocol/test_listing.py holds them equal); a listing
    with a value outside takes :func:`ms` and the encoder for every value.
    """
    xs = tuple(map(operator.sub, itertools.repeat(now_wall), times))
    if not xs:
        return ()
    if min(xs) > 0.0 and max(xs) < 1e9:
        text = (b"%.3f," * len(xs)) % xs
        text = text.replace(b"00,", b",").replace(b"0,", b",").replace(b".,", b".0,")
        return tuple(text[:-1].split(b","))
    return tuple(_encode(ms(x)) for x in xs)


class Listing:
    """Encodes ``session.list`` results: each session's segments are kept until it
    changes, and the last listing's template until any of its sessions, their
    staleness or their claims do."""

    def __init__(self) -> None:
        self._kept: dict[str, _Kept] = {}
        self._seen: list[Session] = []
        """Copies of the sessions the kept template lists, in order."""
        self._key: tuple[Any, ...] | None = None
        self._template = b""
        self._times: tuple[float, ...] = ()

    def encode(
        self,
        profile: str,
        sessions: list[Session],
        stale: list[bool],
        held: list[tuple[Claim, ...]],
        *,
        now_wall: float,
        host: str | None = None,
        more: list[m.SessionInfo] | None = None,
        local_only: set[tuple[str, str]] | None = None,
    ) -> msgspec.Raw:
        """The encoded :class:`~meshd.protocol.methods.ListResult` of ``sessions``, with
        whether each is stale and its claims; ``host`` overrides every session's own
        (a fleet lists this host's name); ``more`` are appended as they are;
        ``local_only``: the (session, resource) pairs granted while the fleet was out of
        reach, marked so (SPEC §12). A listing with ``more`` or ``local_only`` keeps no
        template (they change without the sessions).

        Everything but the two durations of each session goes into a template (bytes
        with ``%b`` where they go), kept while nothing in it changes: the sessions
        compare equal to the copies it was made from (field by field, in C), and so do
        their staleness and claims. A listing is then :func:`durations` and one ``%``.
        """
        key = (profile, host, stale, held)
        if more or local_only or key != self._key or sessions != self._seen:
            template, times = self._compose(
                profile, sessions, stale, held, host=host, more=more, local_only=local_only
            )
            if len(sessions) > CACHED_UP_TO or more or local_only:
                self._key, self._template, self._times, self._seen = None, b"", (), []
                return msgspec.Raw(template % durations(times, now_wall))
            self._key, self._template, self._times = key, template, times
            self._seen = [self._kept[s.session_id][0] for s in sessions]
        return msgspec.Raw(self._template % durations(self._times, now_wall))

    def _compose(
        self,
        profile: str,
        sessions: list[Session],
        stale: list[bool],
        held: list[tuple[Claim, ...]],
        *,
        host: str | None,
        more: list[m.SessionInfo] | None,
        local_only: set[tuple[str, str]] | None,
    ) -> tuple[bytes, tuple[float, ...]]:
        """The template of a listing and the times its durations count from. The
        template is the listing's bytes with a NUL where each duration goes (compact
        JSON holds none), every ``%`` doubled, then each NUL made ``%b``."""
        old = self._kept
        keep = len(sessions) <= CACHED_UP_TO
        kept: dict[str, _Kept] = {}
        out = [_HEAD, _encode(profile), _MIDDLE]
        first = True
        for s, old_s, claimed in zip(sessions, stale, held, strict=True):
            shown = s.host if host is None else host
            entry = old.get(s.session_id)
            if not keep:
                entry = (s, shown, segments(s, shown), ())
            elif entry is None or entry[0] != s or entry[1] != shown:
                view = _shown(s)
                copy = msgspec.structs.replace(s)
                if entry is not None and entry[1] == shown and entry[3] == view:
                    entry = (copy, shown, entry[2], view)  # a heartbeat: nothing shown moved
                else:
                    entry = (copy, shown, segments(s, shown), view)
                kept[s.session_id] = entry
            else:
                kept[s.session_id] = entry
            p = entry[2]
            if claimed:
                claims = _encode(claim_infos(claimed[: m.LISTED_CLAIMS], local_only))
                total = str(len(claimed)).encode()
            else:
                claims, total = _EMPTY, _ZERO
            if not first:
                out.append(b",")
            first = False
            out += (
                p[0], _MARK, p[1], _TRUE if old_s else _FALSE, p[2], claims, p[3], total,
                p[4], _MARK, p[5],
            )  # fmt: skip
        for info in more or ():
            if not first:
                out.append(b",")
            first = False
            out.append(_encode(info))
        out.append(_TAIL)
        self._kept = kept
        template = b"".join(out).replace(b"%", b"%%").replace(_MARK, _DURATION)
        return template, tuple(itertools.chain.from_iterable(map(_TIMES, sessions)))


def _envelope() -> tuple[bytes, bytes, bytes]:
    """ListResult's bytes before the profile, between it and the sessions, and after."""
    text = _encode(m.ListResult(profile=_RAW_MARK, sessions=[_RAW_MARK]))
    head, middle, tail = text.split(_MARK)
    return head, middle, tail


_HEAD, _MIDDLE, _TAIL = _envelope()
