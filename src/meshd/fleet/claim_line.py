"""Standing in line for fleet-wide keys, and being woken when a record changes.

A request that may wait (``wait`` > 0) and found its set held takes a ticket -- the
revision of its wait record ``w.<gid>`` -- and an entry in the line (``q``) of each
record it needs: a later request never barges past it (docs/FLEET.md, "Waiting").
It tries again each time one of those records changes: :meth:`FleetLine.arm` before
a try, :meth:`FleetLine.changed` after it, :meth:`FleetLine.wake` from the watch
(:mod:`meshd.fleet.claim_upkeep`). :class:`meshd.fleet.claims.FleetClaims` offers
these to the claims domain.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import anyio

from meshd.fleet import claim_bucket as bucket
from meshd.fleet.claim_bucket import FLEET_ERRORS, NATS_ERRORS
from meshd.fleet.claim_grants import FleetWaiter, GrantBook
from meshd.fleet.claim_records import Entry, plan, record_name, record_resource, set_value
from meshd.fleet.link import FleetDown, FleetLink, describe
from meshd.keys import Key
from meshd.protocol.claims import Mode

log = logging.getLogger("meshd.fleet.claims")

BACK_POLL = 0.1
"""Seconds between two looks at the link by a request waiting for the fleet to be back."""


class FleetLine:
    """This host's requests in line in the fleet, and the events that wake them."""

    def __init__(
        self, link: FleetLink, book: GrantBook, roots: Sequence[str], ready: Callable[[], bool]
    ) -> None:
        self.link = link
        self.book = book
        self.roots = roots
        self._ready = ready
        """Whether the fleet decides claims now (the link up, this host reconciled)."""
        self._changed: dict[str, anyio.Event] = {}

    async def enqueue(self, session_id: str, keys: Sequence[Key], mode: Mode) -> FleetWaiter:
        """Stand in line for ``keys``: a ticket, and an entry in each record it needs."""
        book = self.book
        kv = await bucket.open_bucket(self.link)
        gid = book.gid()
        book.waiters[gid] = FleetWaiter(gid, session_id, tuple(keys), mode, 0, time.time())
        try:
            ticket = await bucket.create(
                kv, "w." + gid, set_value(keys, session_id, self.link.host, mode)
            )
            me = Entry(gid, session_id, self.link.host, mode, ticket)
            for step in plan(keys, self.roots):
                if step.role == "hold":
                    await bucket.queue(kv, step.name, me, book.seen)
        except BaseException as exc:
            book.waiters.pop(gid, None)
            if isinstance(exc, NATS_ERRORS):
                raise FleetDown(describe(exc)) from exc
            raise
        waiter = book.waiters[gid]
        waiter.ticket = ticket
        return waiter

    async def dequeue(self, waiter: FleetWaiter) -> None:
        """Leave the line (the wait ran out or was given up); never raises."""
        self.book.waiters.pop(waiter.gid, None)
        with anyio.CancelScope(shield=True):
            try:
                kv = await bucket.open_bucket(self.link)
                for step in plan(waiter.keys, self.roots):
                    if step.role == "hold":
                        await bucket.drop(kv, step.name, lambda e: e.gid == waiter.gid)
                await bucket.forget_wait(kv, waiter.gid)
            except FLEET_ERRORS as exc:
                log.info("fleet: leaving the line for %s: %s", waiter.keys, describe(exc))

    def arm(self, keys: Sequence[Key]) -> list[anyio.Event]:
        """Events the watch sets at the next change of a record of ``keys``: armed
        before a try, so a change between the try and the wait is not missed."""
        events = []
        for key in keys:
            name = record_name(record_resource(key))
            ev = self._changed.get(name)
            if ev is None:
                ev = self._changed[name] = anyio.Event()
            events.append(ev)
        return events

    def wake(self, name: str) -> None:
        """Record ``name`` changed: wake the requests armed on it (:meth:`arm`)."""
        ev = self._changed.pop(name, None)
        if ev is not None:
            ev.set()

    @staticmethod
    async def changed(events: list[anyio.Event], timeout: float) -> None:
        """Return when one of ``events`` (from :meth:`arm`) is set, or after ``timeout``."""
        with anyio.move_on_after(timeout):
            async with anyio.create_task_group() as tg:
                for ev in events:

                    async def one(ev: anyio.Event = ev) -> None:
                        await ev.wait()
                        tg.cancel_scope.cancel()

                    tg.start_soon(one)

    async def back(self, timeout: float) -> None:
        """Return once the fleet can decide claims again (the link up, this host
        reconciled), or after ``timeout``: a request with time left to wait waits out
        a blip (a server restart, a reconnect) instead of failing at once."""
        with anyio.move_on_after(timeout):
            await anyio.sleep(BACK_POLL)  # at least this: a try that failed while all
            while not self._ready():  # looked up is not rerun hot
                await anyio.sleep(BACK_POLL)

    def paused(self, session_id: str) -> None:
        """``session_id`` paused: its requests in line are woken to leave it, answered
        ``held`` (docs/CONFORMANCE.md §5b, as the table withdraws its local waits).
        Left in line, one was granted while the session did no work."""
        for w in self.book.waiters.values():
            if w.session_id == session_id:
                w.paused = True
                for key in w.keys:
                    self.wake(record_name(record_resource(key)))

    def waiting(self) -> list[FleetWaiter]:
        """This host's requests in line in the fleet, first come first."""
        return sorted(self.book.waiters.values(), key=lambda w: w.since)
