"""Who holds a fleet-wide key now, as the bucket says: the reads of the fleet's claims.

Every read that reports claims answers a fleet-wide key from here (SPEC §12, one
view): :meth:`FleetHolders.holders` reads the records of the keys asked about
(``claim.check``), :meth:`FleetHolders.held` every set other hosts hold
(``claim.list``, ``sessions show``, the listings), :meth:`FleetHolders.validate`
whether a token holds a key now (``claim.validate``). None writes. A set holds
something only once its commit record is there, and only while its host's lease is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import anyio
import nats.js.errors
from nats.js.kv import KeyValue

from meshd.fleet import claim_bucket as bucket
from meshd.fleet.claim_bucket import NATS_ERRORS
from meshd.fleet.claim_grants import GrantBook
from meshd.fleet.claim_mirror import ClaimMirror
from meshd.fleet.claim_records import plan, record_name, record_resource, set_reason
from meshd.fleet.link import FleetDown, FleetLink, describe
from meshd.keys import Key, from_canonical
from meshd.ports import Holding
from meshd.protocol.claims import Mode
from meshd.protocol.errors import BadKey

READ_TIMEOUT = 5.0
"""Seconds a read of the fleet's holders (``claim.check``) may take before it says
the fleet cannot be reached: a check answers from this host's table then."""


class FleetHolders:
    """The fleet's answer to "who holds these keys", and to "is this token valid"."""

    def __init__(
        self, link: FleetLink, book: GrantBook, roots: Sequence[str], mirror: ClaimMirror, *,
        is_fleet: Callable[[Key], bool], ready: Callable[[], bool],
    ) -> None:  # fmt: skip
        self.link = link
        self.mirror = mirror
        """The commit records and leases in memory (:meth:`held` reads them)."""
        self.book = book
        self.roots = roots
        self.is_fleet = is_fleet
        self._ready = ready
        """Whether the fleet decides claims now (the link up, this host reconciled)."""

    async def holders(self, keys: Sequence[Key]) -> list[Holding]:
        """Other hosts' claims overlapping the fleet-wide ``keys``, as the bucket says
        now (SPEC §12, one view): the holders of each key's record and of the paths
        below it, and the holders of the shared folders above it. A set whose commit
        record is not there yet (in flight, or rolled back) holds nothing; a host whose
        lease ran out holds nothing. :class:`FleetDown` when the fleet cannot say."""
        fleet = [k for k in keys if self.is_fleet(k)]
        if not fleet:
            return []
        if not self._ready():
            raise FleetDown(self.link.last_error or "the fleet link is down")
        try:
            with anyio.fail_after(READ_TIMEOUT):
                kv = await bucket.open_bucket(self.link)
                return await self._holders(kv, fleet)
        except NATS_ERRORS as exc:
            raise FleetDown(describe(exc)) from exc

    async def _holders(self, kv: KeyValue, keys: list[Key]) -> list[Holding]:
        out: list[Holding] = []
        seen: set[tuple[str, str]] = set()
        hosts: dict[str, bool] = {}
        for step in plan(keys, self.roots):
            record, _ = await bucket.read(kv, step.name, self.book.seen)
            entries = record.h if step.role == "intent" else (*record.h, *record.d)
            for e in entries:
                if e.host == self.link.host:
                    continue  # this host's own are in its table
                if e.host not in hosts:
                    hosts[e.host] = await bucket.alive(kv, e.host)
                if not hosts[e.host]:
                    continue
                try:
                    commit = await kv.get("g." + e.gid)
                except nats.js.errors.KeyNotFoundError:
                    continue
                doc = json.loads(commit.value or b"{}")
                for res in doc.get("k", ()):
                    if (e.gid, res) in seen or not _overlaps(res, keys):
                        continue
                    seen.add((e.gid, res))
                    out.append(
                        Holding(e.session, res, e.mode, e.host, commit.revision or 0,
                                reason=set_reason(doc))
                    )  # fmt: skip
        return out

    async def held(self, session_id: str | None = None) -> list[Holding]:
        """Every claim other hosts hold in the fleet now, of ``session_id`` only if given
        (``claim.list``, ``sessions show``, listings: SPEC §12, one view): the commit
        records, a set's token its revision, a host whose lease ran out holding
        nothing. Read in memory from the mirror (:mod:`~meshd.fleet.claim_mirror`:
        current, or the last complete view while it catches up or the link is down);
        over NATS only before the mirror's first complete view. :class:`FleetDown`
        when the fleet cannot say."""
        mirrored = self.mirror.held(session_id)
        if mirrored is not None:
            return mirrored
        if not self._ready():
            raise FleetDown(self.link.last_error or "the fleet link is down")
        try:
            with anyio.fail_after(READ_TIMEOUT):
                kv = await bucket.open_bucket(self.link)
                return await self._held(kv, session_id)
        except NATS_ERRORS as exc:
            raise FleetDown(describe(exc)) from exc

    async def _held(self, kv: KeyValue, session_id: str | None) -> list[Holding]:
        out: list[Holding] = []
        hosts: dict[str, bool] = {}
        watcher = await kv.watch("g.>", ignore_deletes=True)
        try:
            async for entry in watcher:
                if entry is None:
                    break
                doc = json.loads(entry.value or b"{}")
                sid, host = str(doc.get("s", "")), str(doc.get("o", ""))
                if host != self.link.host and (session_id is None or sid == session_id):
                    if host not in hosts:
                        hosts[host] = await bucket.alive(kv, host)
                    if hosts[host]:
                        mode: Mode = "shared" if doc.get("m") == "shared" else "exclusive"
                        since = _wall(entry.created)
                        out += [
                            Holding(sid, str(r), mode, host, entry.revision or 0, since=since,
                                    reason=set_reason(doc))
                            for r in doc.get("k", ())
                        ]  # fmt: skip
                if not entry.delta:
                    break
        finally:
            with anyio.CancelScope(shield=True):
                await watcher.stop()  # type: ignore[no-untyped-call]
        return sorted(out, key=lambda h: (h.since, h.session_id, h.resource))

    async def validate(self, key: Key, token: int) -> tuple[bool, str | None, str | None]:
        """Whether ``token`` holds ``key`` in the fleet now: (valid, session, host)."""
        kv = await bucket.open_bucket(self.link)
        try:
            record, _ = await bucket.read(kv, record_name(record_resource(key)))
            for e in record.h:
                try:
                    commit = await kv.get("g." + e.gid)
                except nats.js.errors.KeyNotFoundError:
                    continue
                if commit.revision != token:
                    continue
                doc = json.loads(commit.value or b"{}")
                if key.text not in doc.get("k", ()):
                    continue
                if e.host == self.link.host:
                    alive = self.book.mine(e.gid)
                else:
                    alive = await bucket.alive(kv, e.host)
                return alive, e.session, e.host
        except NATS_ERRORS as exc:
            raise FleetDown(describe(exc)) from exc
        return False, None, None


def _wall(created: object) -> float:
    """A KV entry's time as wall seconds (nats-py gives a datetime; 0: none)."""
    stamp = getattr(created, "timestamp", None)
    return float(stamp()) if callable(stamp) else 0.0


def _overlaps(resource: str, keys: list[Key]) -> bool:
    """Whether ``resource`` (a key a set in the fleet holds) overlaps one of ``keys``:
    the key itself, a path below it, or a shared folder above it."""
    try:
        held = from_canonical(resource)
    except BadKey:
        return False
    return any(held.overlaps(k) for k in keys)
