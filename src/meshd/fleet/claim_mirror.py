"""The bucket's commit records and leases, mirrored in memory by a watch: what the
listings read (``claim.list``, ``sessions show``, ``session.list``, ``sync``, ``top``).

A listing asks "what does every other host hold now", which is every commit record
(``g.<gid>``: a set's keys, session, host, mode; its revision is the token) of a
host whose lease (``l.<host>``) is there. Read over NATS, that was a scan of the
bucket per call, up to five seconds when the server was slow. :class:`ClaimMirror`
keeps both kinds of records in memory instead, fed by two ordered consumers on the
link's watch connection (last value per key, then every change), so a listing is
answered from memory, off the network.

What a reader sees (docs/FLEET.md, "Listings"):

Each commit record says what its set was claimed for (``r``, its reason): the
listings report it as the holding host does.

* **current** -- the feed is live and caught up: the bucket as of the last change
  delivered (the server sends each change to every watcher as it stores it).
* **catching up** -- after a (re)connection, or once the bucket was made again
  (it had been deleted: noticed when this host makes it, or within a lease period
  by :meth:`ClaimMirror._guard`), the records are read again into a new view; until it is
  complete, readers keep the previous complete view (none before the first: then as
  **none**).
* **last known** -- the link is down: the view as it was when the feed stopped,
  leases frozen at its last delivery (a lease that runs out meanwhile is not seen).
* **none** -- never caught up since the daemon started: the caller reads the
  bucket over NATS, or says it cannot (``FleetDown``).

A lease counts while it is there: for the TTL it was written with (``Nats-TTL``)
from its last renewal, as the server stored it (on the server's clock, as this view
can tell it: :class:`MirrorView`) and as it arrived here, whichever ends first; a
delete or purge of it ends it at once.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import anyio
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from meshd.fleet import claim_bucket as bucket
from meshd.fleet.claim_bucket import BUCKET, FLEET_ERRORS
from meshd.fleet.claim_records import set_reason
from meshd.fleet.link import FleetLink, describe
from meshd.ports import Holding
from meshd.protocol.claims import Mode

log = logging.getLogger("meshd.fleet.claims")

GONE = ("DEL", "PURGE")
"""``KV-Operation`` values of a key's removal."""


@dataclass(frozen=True, slots=True)
class CommitSeen:
    """One commit record: a set another host (or this one) holds in the fleet."""

    session_id: str
    host: str
    mode: Mode
    keys: tuple[str, ...]
    token: int
    since: float
    """Wall time the server stored it."""
    reason: str = ""
    """What the set was claimed for ("" in a record written without one)."""


@dataclass(frozen=True, slots=True)
class LeaseSeen:
    """One renewal of a host's lease, as delivered here."""

    received: float
    """When it arrived here (``time.monotonic()``)."""
    stamp: float
    """When the server stored it (its wall time; 0: not said)."""
    ttl: float


@dataclass(slots=True)
class MirrorView:
    """One complete picture of the commit records and leases.

    A lease runs out on the server ``ttl`` seconds after the server stored it. A
    renewal delivered late (read at a catch-up, just before it ran out) counted here
    for ``ttl`` from its arrival: a host that had stopped renewing was listed up to
    twice its TTL. Its age is now also judged on the server's clock, never on this
    host's wall clock (the two need not agree): the newest server time delivered
    (each host's renewals bring one every lease period, this host's among them), plus
    the time passed here since (:meth:`server_now`)."""

    commits: dict[str, CommitSeen] = field(default_factory=dict)
    leases: dict[str, LeaseSeen] = field(default_factory=dict)
    """Lease key -> its last renewal seen here."""
    clock: tuple[float, float] | None = None
    """(the newest server time delivered, ``time.monotonic()`` when it arrived)."""

    def server_now(self, now: float) -> float | None:
        """The server's wall time at ``now`` (``time.monotonic()``), as this view can
        tell: at most the server's (a delivery's delay only makes it lag); None
        before any delivery said a time."""
        if self.clock is None:
            return None
        stamp, at = self.clock
        return stamp + (now - at)

    def lease_counts(self, key: str, now: float) -> bool:
        """Whether lease ``key`` counts at ``now``: within its TTL of its arrival
        here, and of its storing by the server on the server's clock."""
        lease = self.leases.get(key)
        if lease is None or now >= lease.received + lease.ttl:
            return False
        server = self.server_now(now)
        return lease.stamp <= 0 or server is None or server < lease.stamp + lease.ttl

    def apply(self, key: str, value: bytes, revision: int, gone: bool, *, ttl: float,
              stamp: float, now: float, server: bool = True) -> None:  # fmt: skip
        """Record ``key``'s change (a commit record ``g.…`` or a lease ``l.…``),
        stored at ``stamp`` (wall time; 0: not said), arrived ``now``. ``server``: the
        stamp is the server's (a delivery by the watch), which sets the view's clock;
        not so this host's own wall time (:meth:`ClaimMirror.own_commit`)."""
        if server and stamp > 0 and (self.clock is None or stamp > self.clock[0]):
            self.clock = (stamp, now)
        if key.startswith("g."):
            gid = key[2:]
            if gone:
                self.commits.pop(gid, None)
                return
            known = self.commits.get(gid)
            if known is not None and known.token == revision:
                return  # this host's own commit, applied when it was made (own_commit)
            try:
                doc: Any = json.loads(value or b"{}")
            except ValueError:
                doc = None
            raw_keys = doc.get("k", ()) if isinstance(doc, dict) else None
            if not isinstance(raw_keys, (list, tuple)):
                # Unreadable, not an object, or keys that are not a list: holds nothing.
                # Raising here would stop the watch's callback on this record, and the
                # mirror would never finish catching up.
                self.commits.pop(gid, None)
                return
            mode: Mode = "shared" if doc.get("m") == "shared" else "exclusive"
            keys = tuple(str(r) for r in raw_keys)
            self.commits[gid] = CommitSeen(
                str(doc.get("s", "")), str(doc.get("o", "")), mode, keys, revision, stamp,
                set_reason(doc),
            )  # fmt: skip
        elif key.startswith("l."):
            if gone:
                self.leases.pop(key, None)
            else:
                self.leases[key] = LeaseSeen(now, stamp, ttl)

    def held(self, me: str, session_id: str | None, now: float) -> list[Holding]:
        """Every claim of a host other than ``me`` whose lease counts at ``now``."""
        out: list[Holding] = []
        alive: dict[str, bool] = {}
        for c in self.commits.values():
            if c.host == me or (session_id is not None and c.session_id != session_id):
                continue
            if c.host not in alive:
                alive[c.host] = self.lease_counts(bucket.lease_key(c.host), now)
            if alive[c.host]:
                out += [
                    Holding(c.session_id, r, c.mode, c.host, c.token, since=c.since,
                            reason=c.reason)
                    for r in c.keys
                ]  # fmt: skip
        return sorted(out, key=lambda h: (h.since, h.session_id, h.resource))


class ClaimMirror:
    """The commit records and leases of the claims bucket, kept in memory by a watch."""

    def __init__(self, link: FleetLink, *, check_every: Callable[[], float] = lambda: 5.0) -> None:
        self.link = link
        self._check_every = check_every
        """Seconds between two looks at whether the bucket is still the one followed
        (:func:`~meshd.fleet.claim_bucket.replaced`): the lease's renewal period."""
        self.view: MirrorView | None = None
        """The last complete view (None: never caught up)."""
        self.live = False
        """The feed is up and ``view`` is caught up with it."""
        self.stopped: float | None = None
        """When the feed last stopped (``time.monotonic()``): leases are frozen there."""
        self.heard: float | None = None
        """When the feed last delivered something (``time.monotonic()``)."""
        self.catching_up = False
        self.changes = 0
        """Changes applied since the daemon started (for ``fleet status``)."""

    def held(self, session_id: str | None = None) -> list[Holding] | None:
        """Other hosts' claims as the mirror has them (None: it has no complete view)."""
        view = self.view
        if view is None:
            return None
        now = time.monotonic() if self.live or self.stopped is None else self.stopped
        return view.held(self.link.host, session_id, now)

    def own_commit(self, name: str, value: bytes, revision: int) -> None:
        """This host made commit record ``name`` at ``revision``: in the view now, so its
        delivery by the watch is known when it comes and not decoded again (a view
        still catching up gets it from the watch like any other)."""
        if self.live and self.view is not None:
            now = time.monotonic()
            self.view.apply(name, value, revision, False, ttl=math.inf, stamp=time.time(),
                            now=now, server=False)  # fmt: skip

    def status(self) -> dict[str, Any]:
        state = (
            "current" if self.live
            else "catching up" if self.catching_up
            else "last known" if self.view is not None
            else "none"
        )  # fmt: skip
        return {
            "state": state,
            "commits": 0 if self.view is None else len(self.view.commits),
            "changes": self.changes,
        }

    async def run(self) -> None:
        """Follow the records while the link is up, again at each link-up; until cancelled."""
        while True:
            await self.link.wait_connected()
            try:
                await self._follow()
            except FLEET_ERRORS as exc:
                log.info("fleet claims mirror: %s (again shortly)", describe(exc))
            finally:
                self.feed_stopped(time.monotonic())
            await anyio.sleep(0.2)

    def feed_stopped(self, now: float) -> None:
        """The feed stopped (noticed at ``now``): a current view becomes the last known,
        its leases frozen at the feed's last delivery. The feed fell silent then: a
        link noticed down seconds later (its pings unanswered) would otherwise have
        let leases renewed just before the silence run out in the frozen view."""
        if self.live:
            self.stopped = now if self.heard is None else min(now, self.heard)
        self.live = self.catching_up = False

    async def _follow(self) -> None:
        """Read the commit records and leases into a new view, make it the view once
        complete, keep it current until the link drops or the bucket is another one."""
        link = self.link
        await bucket.open_bucket(link, watch=True)  # bound there (the reconcile makes it)
        js = link.watch_js
        if js is None:
            return
        feed = _Feed(link.bucket(BUCKET), self)
        made = link.rebound()  # the bucket made or bound again (deleted?): start again
        down = anyio.Event()
        undo = link.on_change(lambda up: None if up else down.set())
        subs: list[Any] = []
        self.catching_up = True
        self.heard = None
        try:
            born = await bucket.made_at(js, feed.name)  # before the consumers: none missed
            for which in ("g", "l"):
                sub = await js.subscribe(
                    f"{feed.prefix}{which}.>", stream=f"KV_{feed.name}", cb=feed.handler(which),
                    ordered_consumer=True, deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
                    inactive_threshold=300,
                )  # fmt: skip
                subs.append(sub)
                info = await sub.consumer_info()
                if info.num_pending == 0 and not (info.delivered and info.delivered.consumer_seq):
                    feed.caught_up(which)  # nothing there: nothing comes before a change
            async with anyio.create_task_group() as tg:
                gone = anyio.Event()  # made again under this host: start again
                tg.start_soon(self._guard, js, feed.name, born, gone)
                await _first(feed.complete, down, made, gone)
                if not (down.is_set() or made.is_set() or gone.is_set()):
                    self.view, self.live, self.catching_up = feed.view, True, False
                    self.stopped = None
                    await _first(down, made, gone)
                tg.cancel_scope.cancel()
        finally:
            undo()
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                for sub in subs:
                    try:
                        await sub.unsubscribe()
                    except Exception as exc:
                        log.debug("fleet claims mirror: unsubscribe: %s", describe(exc))

    async def _guard(
        self, js: JetStreamContext, name: str, born: datetime | None, gone: anyio.Event
    ) -> None:
        """Set ``gone`` once the bucket followed is not the one there now (deleted, or
        deleted and made again: :func:`~meshd.fleet.claim_bucket.replaced`). Nothing
        else says so to a host that wrote nothing to the bucket meanwhile: its lease
        renewals are refused, but it has no claim to lose, and its consumers carry on
        past the new bucket's first records."""
        while True:
            await anyio.sleep(self._check_every())
            if await bucket.replaced(js, name, born):
                break
        log.warning("fleet claims mirror: bucket %s deleted or made again: read again", name)
        gone.set()


class _Feed:
    """One run of the watch: the view it builds, and whether it caught up."""

    def __init__(self, name: str, mirror: ClaimMirror) -> None:
        self.name = name
        self.prefix = f"$KV.{name}."
        self.mirror = mirror
        self.view = MirrorView()
        self.waiting = {"g": True, "l": True}
        self.complete = anyio.Event()

    def caught_up(self, which: str) -> None:
        self.waiting[which] = False
        if not any(self.waiting.values()):
            self.complete.set()

    def handler(self, which: str) -> Callable[[Any], Awaitable[None]]:
        """The callback of the ``which`` (``g`` or ``l``) records' consumer."""

        async def on_msg(msg: Any) -> None:
            meta = msg.metadata
            hdr = msg.headers or {}
            gone = hdr.get("KV-Operation") in GONE or hdr.get("Nats-Marker-Reason") is not None
            ttl_text = hdr.get("Nats-TTL")
            ttl = _seconds(ttl_text) if ttl_text else math.inf
            stamp = meta.timestamp.timestamp() if meta.timestamp is not None else 0.0
            now = self.mirror.heard = time.monotonic()
            self.view.apply(msg.subject[len(self.prefix):], msg.data, meta.sequence.stream,
                            gone, ttl=ttl, stamp=stamp, now=now)  # fmt: skip
            self.mirror.changes += 1
            if meta.num_pending == 0 and self.waiting[which]:
                self.caught_up(which)

        return on_msg


async def _first(*events: anyio.Event) -> None:
    """Return as soon as one of ``events`` is set."""
    async with anyio.create_task_group() as tg:

        async def until(ev: anyio.Event) -> None:
            await ev.wait()
            tg.cancel_scope.cancel()

        for ev in events:
            tg.start_soon(until, ev)


def _seconds(text: str) -> float:
    """A ``Nats-TTL`` header's seconds (``15``, ``15s``, ``1m``); unreadable: for ever."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text[-1:] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        return math.inf
