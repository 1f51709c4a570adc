"""Giving fleet claims back: forgotten here at once, written to the bucket soon.

A release (or a loss, or a set that ended with its session) is forgotten in this
host's :class:`~meshd.fleet.claim_grants.GrantBook` at once -- no request of this
host counts it any more -- and its entries and commit record leave the bucket
after: together, at most :data:`RELEASES_AT_ONCE` writes in flight, and what the
server does not take now goes to a backlog tried again while the link is up (the
reconcile at the next link-up drops whatever is left). Other hosts see the claim
held until its writes land.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

import anyio
from nats.js.kv import KeyValue

from meshd.fleet import claim_bucket as bucket
from meshd.fleet.claim_bucket import FLEET_ERRORS
from meshd.fleet.claim_grants import COMMIT_RECORD, WAIT_RECORD, FleetGrant, GrantBook
from meshd.fleet.claim_records import Step, plan
from meshd.fleet.link import FleetLink, describe
from meshd.ports import ClaimTable

log = logging.getLogger("meshd.fleet.claims")

RELEASES_AT_ONCE = 16
"""Writes of a release (or of the backlog) sent at once: a session that ends with many
fleet claims does not flood the server."""


class FleetReleases:
    """This host's fleet claims given back or lost, and the writes that say so."""

    def __init__(
        self, link: FleetLink, book: GrantBook, roots: Sequence[str], local: ClaimTable,
        *, pace: Callable[[], float],
    ) -> None:  # fmt: skip
        self.link = link
        self.book = book
        self.roots = roots
        self.local = local
        self._pace = pace
        """Seconds between lease renewals: the backlog waits a quarter of it after a failure."""
        self._backlog: list[tuple[str, Step]] = []
        self._backlog_ready = anyio.Event()

    def later(self, work: Iterable[tuple[str, Step]]) -> None:
        """Write ``work`` (gid, step) to the bucket in the background, while the link is up."""
        self._backlog.extend(work)
        self._backlog_ready.set()

    def let_go(self, session_id: str, claims: Iterable[tuple[str, int]]) -> list[tuple[str, Step]]:
        """Forget these claims (resource, token) here at once; what is left to do in the
        bucket: (gid, step) pairs (a step, or a record to delete)."""
        book = self.book
        work: list[tuple[str, Step]] = []
        by_gid: dict[str, list[str]] = {}
        for res, token in claims:
            book.local_only.discard((session_id, res))
            gid = book.by_claim.get((session_id, res))
            if gid is None or book.grants[gid].token != token:
                continue  # not this grant's: a newer one holds it now
            del book.by_claim[(session_id, res)]
            by_gid.setdefault(gid, []).append(res)
        for gid, gone in by_gid.items():
            grant = book.grants[gid]
            dropped = [grant.keys.pop(r) for r in gone if r in grant.keys]
            if not grant.keys:
                del book.grants[gid]
                work.append((gid, COMMIT_RECORD))  # the token dies for the whole set at once
            kept = {(s.name, s.role) for s in plan(grant.keys.values(), self.roots)}
            work += [(gid, s) for s in plan(dropped, self.roots) if (s.name, s.role) not in kept]
        return work

    async def release(self, session_id: str, claims: Iterable[tuple[str, int]]) -> None:
        """This host released these claims (resource, token): out of the fleet too.
        Never raises: what cannot be written now is dropped at the next reconcile."""
        work = self.let_go(session_id, claims)
        if work:
            with anyio.CancelScope(shield=True):
                await self._do(work)

    def release_soon(self, session_id: str, claims: Iterable[tuple[str, int]]) -> None:
        """:meth:`release` from a synchronous caller: forgotten now, written soon."""
        work = self.let_go(session_id, claims)
        if work:
            self.later(work)

    def lose(self, grant: FleetGrant, resources: list[str], how: str) -> None:
        """The fleet took ``resources`` of ``grant`` from this host: forget them, tell
        the lock table, and delete the commit record once the set is empty."""
        book = self.book
        for res in resources:
            grant.keys.pop(res, None)
            book.by_claim.pop((grant.session_id, res), None)
        if not grant.keys:
            book.grants.pop(grant.gid, None)
            self.later([(grant.gid, COMMIT_RECORD)])
        self.local.fleet_lost(grant.session_id, resources, grant.token, how)

    async def _do(self, work: list[tuple[str, Step]]) -> None:
        """Write releases to the bucket, all at once (a commit record's delete is sent
        before its entries' removals, though either alone ends its token: validate
        needs both); what fails (a timeout, the link down) goes to the backlog, which
        tries again while the link is up: other hosts would see the entries as held
        until then. (A link that drops leaves it to the reconcile.)"""
        failed: dict[int, str] = {}  # index in work -> why

        async def one(kv: KeyValue, i: int, gid: str, step: Step) -> None:
            try:
                await self._undo_one(kv, gid, step)
            except FLEET_ERRORS as exc:
                failed[i] = describe(exc)

        try:
            kv = await bucket.open_bucket(self.link)
        except FLEET_ERRORS as exc:
            failed = dict.fromkeys(range(len(work)), describe(exc))
        else:
            if len(work) <= RELEASES_AT_ONCE:  # the common case: no limit to wait on
                await bucket.together(*(one(kv, i, g, step) for i, (g, step) in enumerate(work)))
            else:
                limit = anyio.CapacityLimiter(RELEASES_AT_ONCE)

                async def limited(kv: KeyValue, i: int, gid: str, step: Step) -> None:
                    async with limit:
                        await one(kv, i, gid, step)

                async with anyio.create_task_group() as tg:
                    for i, (gid, step) in enumerate(work):
                        tg.start_soon(limited, kv, i, gid, step)
        if failed:
            log.info("fleet: releasing: %s (tried again)", next(iter(failed.values())))
            self.later(work[i] for i in sorted(failed))

    async def _undo_one(self, kv: KeyValue, gid: str, step: Step) -> None:
        if step in (COMMIT_RECORD, WAIT_RECORD):
            await kv.delete(step.name + gid)
        else:
            await bucket.undo(kv, [step], gid, self.book.seen)

    async def drain(self) -> None:
        """Write the backlog whenever it has work and the link is up; until cancelled."""
        while True:
            await self._backlog_ready.wait()
            self._backlog_ready = anyio.Event()
            await self.link.wait_connected()
            work, self._backlog = self._backlog, []
            await self._do(work)
            if self._backlog:
                await anyio.sleep(self._pace() / 4)  # failed: not in a tight loop
