"""``once.reserve|finish|resolve|list``: the at-most-once ledger (SPEC §7, §8).

The rules are :mod:`meshd.core.work.ledger`'s; this module makes them durable:

* Every change is committed, **synced** (``synchronous=FULL`` for its batch:
  :mod:`meshd.storage_shared` marks the ledger's write kinds), before the reply.
  ``meshctl once`` starts COMMAND only after ``reserved`` came back, so the
  reservation is on disk before the side effect can begin.
* A commit the disk refuses is taken back in memory: the caller is told
  ``UNAVAILABLE`` and must not run, and the key is as it was.
* Runners are sessions: a ``running`` key whose session is gone (ended, expired,
  its processes killed) turns ``unknown`` -- at the sweeper's next tick, and in
  any case before anyone is told anything about that key.
"""

from __future__ import annotations

from meshd.core.state import MeshState
from meshd.core.work.ledger import Entry, LedgerRefused
from meshd.domain import Domain
from meshd.protocol import ledger as pl
from meshd.service import Conn, rfc3339


def wire(e: Entry | None) -> pl.LedgerEntry | None:
    if e is None:
        return None
    return pl.LedgerEntry(
        key=e.key, state=e.state, session_id=e.session_id, reserved_at=rfc3339(e.reserved_at),
        updated_at=rfc3339(e.updated_at), ttl=e.ttl, note=e.note, resolved_by=e.resolved_by,
        expires_at=None if e.expires_at is None else rfc3339(e.expires_at),
    )  # fmt: skip


class LedgerHandlers(Domain):
    name = "ledger"

    def sweep(self) -> None:
        """Keys whose runner is gone turn ``unknown``."""
        st = self.svc.state
        st.ledger.sweep(st.live)

    def install(self) -> None:
        self.svc.add(pl.ONCE_RESERVE, self.reserve, is_async=True)
        self.svc.add(pl.ONCE_FINISH, self.finish, is_async=True)
        self.svc.add(pl.ONCE_RESOLVE, self.settle, is_async=True)
        self.svc.add(pl.ONCE_LIST, self.list, is_async=True)

    async def _commit(self, work: MeshState, key: str, before: Entry | None) -> None:
        """Store (synced); on refusal put ``key`` back as it was and re-raise."""
        try:
            await self.svc.commit()
        except BaseException:
            work.ledger.put_back(key, before)
            raise

    async def reserve(self, p: pl.OnceReserveParams, conn: Conn) -> pl.OnceReserveResult:
        work = self.svc.state
        if not self.svc.state.settings.enabled:
            return pl.OnceReserveResult(status="reserved", key=p.key, disabled=True)
        self.svc.state.registry.get(p.session_id)
        before = work.ledger.entries.get(p.key)
        out = work.ledger.reserve(p.key, p.session_id, work.live, ttl=p.ttl, note=p.note)
        await self._commit(work, p.key, before)
        return pl.OnceReserveResult(status=out.status, key=p.key, entry=wire(out.entry))

    async def finish(self, p: pl.OnceFinishParams, conn: Conn) -> pl.OnceFinishResult:
        work = self.svc.state
        before = work.ledger.current(p.key, work.live)
        ok = before is not None and before.state == "running" and before.session_id == p.session_id
        after = work.ledger.finish(p.key, p.session_id, p.outcome)
        await self._commit(work, p.key, before)
        state = "free" if after is None else after.state
        return pl.OnceFinishResult(key=p.key, ok=ok, state=state, entry=wire(after))

    async def settle(self, p: pl.OnceResolveParams, conn: Conn) -> pl.OnceResolveResult:
        work = self.svc.state
        before = work.ledger.entries.get(p.key)
        try:
            previous = work.ledger.resolve(p.key, p.state, p.by or p.session_id, work.live)
        except LedgerRefused as exc:
            running = work.ledger.entries.get(p.key)
            return pl.OnceResolveResult(
                key=p.key, state="running", previous=wire(running), refused=True, reason=str(exc)
            )
        await self._commit(work, p.key, before)
        return pl.OnceResolveResult(key=p.key, state=p.state, previous=wire(previous))

    async def list(self, p: pl.OnceListParams, conn: Conn) -> pl.OnceListResult:
        work = self.svc.state
        entries = [e for e in work.ledger.listing(work.live) if e.key.startswith(p.prefix)]
        await self.svc.commit()  # keys that turned unknown just now are stored before they show
        return pl.OnceListResult(entries=[w for e in entries if (w := wire(e)) is not None])
