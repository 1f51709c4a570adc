"""What the fleet's claims bucket holds, and the rule that decides a claim there.

Pure: no NATS, no I/O. :mod:`meshd.fleet.claim_bucket` reads and writes these records
with compare-and-set; this module says what a record means (docs/FLEET.md,
"Fleet-wide claims"). One record per fleet resource touched, named
:func:`record_name`; each lists

* ``h``: the holders of the resource itself,
* ``d``: holders of paths under it (the intent entries of hierarchical locking,
  so a claim on a folder sees the claims below it in one read),
* ``q``: waiters for it, each with its ticket (its place in line).

An :class:`Entry` names the request (``gid``), its session and host, and the mode.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace
from typing import Literal

from meshd.keys import Key
from meshd.protocol.claims import REASON_MAX, Mode

Role = Literal["hold", "intent"]
Related = Callable[["Entry"], bool]


@dataclass(frozen=True, slots=True)
class Entry:
    """One request's entry in a record: ``gid`` is unique per request (every host)."""

    gid: str
    session: str
    host: str
    mode: Mode
    ticket: int = 0
    """A waiter's place in line (the revision of its wait record); 0 for holders."""

    def to_json(self) -> dict[str, object]:
        d: dict[str, object] = {"g": self.gid, "s": self.session, "o": self.host, "m": self.mode}
        if self.ticket:
            d["t"] = self.ticket
        return d

    @classmethod
    def from_json(cls, d: dict[str, object]) -> Entry:
        mode: Mode = "shared" if d.get("m") == "shared" else "exclusive"
        ticket = d.get("t", 0)
        return cls(
            str(d["g"]), str(d["s"]), str(d["o"]), mode, ticket if isinstance(ticket, int) else 0
        )


@dataclass(frozen=True, slots=True)
class Record:
    """The value of one resource's record (see the module docstring)."""

    h: tuple[Entry, ...] = ()
    d: tuple[Entry, ...] = ()
    q: tuple[Entry, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.h or self.d or self.q)

    def entries(self) -> Iterable[Entry]:
        yield from self.h
        yield from self.d
        yield from self.q

    def encode(self) -> bytes:
        doc = {f: [e.to_json() for e in getattr(self, f)] for f in ("h", "d", "q")}
        return json.dumps({k: v for k, v in doc.items() if v}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> Record:
        """The record in ``raw``; an absent, deleted or unreadable value reads as empty
        (a record only ever blocks through entries it can name)."""
        if not raw:
            return cls()
        try:
            doc = json.loads(raw)
            return cls(*(tuple(Entry.from_json(e) for e in doc.get(f, ())) for f in "hdq"))
        except (ValueError, KeyError, TypeError, AttributeError):
            return cls()

    def adding(self, where: Literal["h", "d", "q"], entry: Entry) -> Record:
        """This record with ``entry`` in ``where`` (replacing one with the same gid there)."""
        kept = tuple(e for e in getattr(self, where) if e.gid != entry.gid)
        return replace(self, **{where: (*kept, entry)})

    def without(self, drop: Callable[[Entry], bool], where: str = "hdq") -> Record:
        """This record less every entry ``drop`` is true for (in the lists ``where`` names)."""
        return Record(
            *(tuple(e for e in getattr(self, f) if f not in where or not drop(e)) for f in "hdq")
        )


def set_value(keys: Iterable[Key], session: str, host: str, mode: Mode, reason: str = "") -> bytes:
    """The value of a set's commit record (``g.<gid>``) or wait record (``w.<gid>``):
    its keys, session, host and mode, read back by a reconcile and by ``validate``;
    a commit record also the reason the set was claimed for (``r``, at most
    ``REASON_MAX`` characters, left out when empty), which every host's listings
    and ``check`` report (SPEC §12, one view). In the commit record only: it is
    written once per set, while the key records (``k.…``) are read and rewritten by
    every request that meets them."""
    doc: dict[str, object] = {"k": [k.text for k in keys], "s": session, "o": host, "m": mode}
    if reason:
        doc["r"] = reason[:REASON_MAX]
    return json.dumps(doc).encode()


def set_reason(doc: object) -> str:
    """The reason in a commit record's value ``doc`` (decoded JSON); "" when there is
    none: a host running a release before reasons were carried writes none."""
    reason = doc.get("r", "") if isinstance(doc, dict) else ""
    return reason[:REASON_MAX] if isinstance(reason, str) else ""


def clash(a: Mode, b: Mode) -> bool:
    """Two modes conflict unless both are shared."""
    return a == "exclusive" or b == "exclusive"


def blockers(record: Record, role: Role, me: Entry, related: Related) -> list[Entry]:
    """The entries of ``record`` that keep ``me`` (in ``role``) out.

    A *hold* is kept out by a clashing holder, holder below, or earlier waiter; an
    *intent* (``me`` holds a path below this one) by a clashing holder or earlier
    waiter of this resource. Entries of ``me``'s own request, and of sessions
    ``related`` to it (the same session, its ancestors and descendants on the same
    host), never block. A waiter is earlier when its ticket is smaller than ``me``'s;
    a request without a ticket (not waiting) is behind every waiter: it never barges.
    """

    def blocks(e: Entry) -> bool:
        return e.gid != me.gid and clash(e.mode, me.mode) and not related(e)

    def earlier(e: Entry) -> bool:
        return me.ticket == 0 or e.ticket < me.ticket

    out = [e for e in record.h if blocks(e)]
    if role == "hold":
        out += [e for e in record.d if blocks(e)]
    out += [e for e in record.q if blocks(e) and earlier(e)]
    return out


def record_name(resource: str) -> str:
    """The KV key of ``resource``'s record: ``k.`` and the resource in url-safe base64
    (a KV key allows only ``[-/_=.A-Za-z0-9]``, and a dot would split it)."""
    return "k." + base64.urlsafe_b64encode(resource.encode()).decode().rstrip("=")


def resource_of(name: str) -> str | None:
    """The resource a record name stands for (None if ``name`` is no record name)."""
    if not name.startswith("k."):
        return None
    raw = name[2:]
    try:
        return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return None


def record_resource(key: Key) -> str:
    """The resource whose record decides ``key``: ``file:`` and ``repo:`` share one
    path space (SPEC §5), so both are decided in the ``file:`` record of the path."""
    return f"file:{key.value}" if key.is_path else key.text


def fleet_wide(key: Key, kinds: Collection[str], roots: Iterable[str]) -> bool:
    """Whether ``key`` is decided by the fleet: a kind of ``kinds`` (``shared_kinds``),
    or a path under a folder of ``roots`` (``shared_paths``)."""
    if key.is_path:
        return shared_root(key, roots) is not None
    return key.kind in kinds


def shared_root(key: Key, roots: Iterable[str]) -> str | None:
    """The outermost folder of ``roots`` that holds path ``key`` (or is it), else None."""
    if not key.is_path:
        return None
    best: str | None = None
    for root in roots:
        inside = key.value == root or key.value.startswith(root.rstrip("/") + "/")
        if inside and (best is None or len(root) < len(best)):
            best = root
    return best


@dataclass(frozen=True, slots=True)
class Step:
    """One record a set touches, and how: ``hold`` its own resource, ``intent`` a path below."""

    name: str
    resource: str
    role: Role


def plan(keys: Iterable[Key], roots: Iterable[str]) -> list[Step]:
    """The records a set touches, in the one order every host uses (by record name).

    A path key under a shared folder adds an *intent* step for each folder from the
    shared root down to its parent, so a claim on a folder meets the claims below it.
    A record both held and an intent keeps both steps (the hold first).
    """
    roots = tuple(roots)
    steps: dict[tuple[str, Role], Step] = {}
    for key in keys:
        res = record_resource(key)
        steps[(res, "hold")] = Step(record_name(res), res, "hold")
        root = shared_root(key, roots)
        if root is None:
            continue
        depth = len([p for p in root.split("/") if p])
        for n in range(depth, len(key.parts)):
            folder = "file:/" + "/".join(key.parts[:n])
            steps.setdefault((folder, "intent"), Step(record_name(folder), folder, "intent"))
    return sorted(steps.values(), key=lambda s: (s.name, s.role != "hold"))


class Seen:
    """The newest version of each record this host saw (the watch, its own reads and
    writes): a hint that saves the read before a compare-and-set.

    Only ever trusted to say a record is *free*: the write is a compare-and-set over
    the revision the hint names, so it lands only if the record is still exactly
    what was decided on, and a stale hint just loses that race (then the record is
    read). A hint that something blocks, or that an entry is already there, is
    confirmed by a read before anything is answered (:meth:`FleetClaims._take`).
    """

    LIMIT = 10_000
    """Records kept at most: the bucket keeps every record ever touched."""

    def __init__(self) -> None:
        self._by_name: dict[str, tuple[Record | None, bytes | None, int]] = {}
        """name -> (the record, its bytes, its revision); either of the first two may
        be missing until asked for: the watch delivers bytes, decoded only when a
        request uses them (most deliveries never are)."""
        self._mine: dict[tuple[str, int], bytes] = {}
        """(name, revision) -> bytes of this host's own writes that the watch has not
        delivered yet (:meth:`wrote`, :meth:`echo`)."""
        self.on_write: Callable[[str], None] | None = None
        """Called with a record's name once a write of this host landed there: the
        local waiters are woken from the write itself, not from its echo."""

    def get(self, name: str) -> tuple[Record, int] | None:
        known = self._by_name.get(name)
        if known is None:
            return None
        record, raw, rev = known
        if record is None:
            record = Record.decode(raw)
            self._by_name[name] = (record, raw, rev)
        return record, rev

    def saw(self, name: str, record: Record | bytes, revision: int) -> None:
        """The watch delivered ``record`` (or its bytes) at ``revision``: kept when it is
        newer than what is known. When it is not, the hint is dropped (the next claim of
        it reads): an older version is usually the watch catching up with one this host
        wrote since, but it is also what a bucket replaced under a link that stayed up
        looks like (its revisions start again), and a hint from the old bucket could then
        name a revision the new one reaches with another record -- a compare-and-set
        over it would land on a record nobody read. One read is the price. The same
        version again (this host's own write, delivered) changes nothing, and is
        compared without decoding it."""
        known = self._by_name.get(name)
        if known is None or known[2] < revision:
            self.now(name, record, revision)
        elif known[2] > revision or not _same(known, record):
            del self._by_name[name]

    def now(
        self, name: str, record: Record | bytes, revision: int, raw: bytes | None = None
    ) -> None:
        """The server just said ``record`` (or its bytes; ``raw``: its bytes too, when
        known) is at ``revision`` (a read, or this host's own write): kept whatever was
        known (a bucket replaced while the link stayed up starts its revisions again,
        below the ones seen)."""
        if name not in self._by_name and len(self._by_name) >= self.LIMIT:
            self._by_name.clear()
        if isinstance(record, bytes):
            self._by_name[name] = (None, record, revision)
        else:
            self._by_name[name] = (record, raw, revision)

    def wrote(self, name: str, record: Record, revision: int, raw: bytes) -> None:
        """This host's compare-and-set of ``record`` (``raw``) landed at ``revision``:
        kept as :meth:`now` does, remembered until the watch delivers it back
        (:meth:`echo`), and :attr:`on_write` told at once.

        Whoever this write can let in (a waiter of this host) is woken here, a watch
        delivery earlier; the other hosts learn of it from their watches as ever. The
        echo comes on the watch's own connection and is often handled before this
        acknowledgement (about half the time under load): then that version is known
        already, it was handled as a delivery (its waiters woken), and nothing is left
        to do or to wait for."""
        known = self._by_name.get(name)
        came_first = known is not None and known[2] == revision and _same(known, raw)
        self.now(name, record, revision, raw)
        if came_first:
            return
        if len(self._mine) >= self.LIMIT:  # echoes that never came (the watch was down)
            self._mine.clear()
        self._mine[(name, revision)] = raw
        if self.on_write is not None:
            self.on_write(name)

    def echo(self, name: str, raw: bytes, revision: int) -> bool:
        """Whether the watch's delivery of ``name`` at ``revision`` is this host's own
        write coming back (then it was handled when it landed: :meth:`wrote`; nothing
        to wake, keep or check). Only the very bytes written at that revision count:
        anything else is a delivery like any other."""
        mine = self._mine.pop((name, revision), None)
        return mine is not None and mine == raw

    def forget(self) -> None:
        """Drop every hint (at a link-up: the bucket may have been replaced)."""
        self._by_name.clear()
        self._mine.clear()


def _same(known: tuple[Record | None, bytes | None, int], other: Record | bytes) -> bool:
    """Whether a known version and ``other`` (a record or its bytes) are the same."""
    record, raw = known[0], known[1]
    if isinstance(other, bytes):
        if raw is not None:
            return raw == other
        return record == Record.decode(other)
    if record is not None:
        return record == other
    return Record.decode(raw) == other
