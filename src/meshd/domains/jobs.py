"""``job.*``: declared jobs, their runs and deferrals, and the radar (SPEC §7 "Jobs").

The declarations are the ``[jobs.NAME]`` tables of the config the daemon loaded
(a reload swaps them); the runs are told by ``meshctl job run`` (start, end,
defer) and kept by :class:`meshd.core.work.jobs.JobBook`, stored before the reply.
A run whose session is gone without an end is closed as ``died`` by the sweep
(every tick: the running jobs are few). ``job.wait`` parks until the running run
of a job ends, at most ``max_query_timeout`` per call (the CLI asks again).
"""

from __future__ import annotations

import sqlite3

import anyio

from meshd.core.work.jobs import JobEvent, JobSpec
from meshd.domain import Domain
from meshd.domains.claim_view import ClaimView
from meshd.keys import from_canonical
from meshd.protocol import jobs as pj
from meshd.protocol.contract import rfc3339
from meshd.protocol.errors import NotFound
from meshd.protocol.jsonrpc import Later
from meshd.service import Conn, Service
from meshd.store.jobs import load_events


def _maybe(ev: JobEvent | None) -> pj.JobEventResult | None:
    return None if ev is None else _event(ev)


def _event(ev: JobEvent) -> pj.JobEventResult:
    return pj.JobEventResult(
        name=ev.name, kind=ev.kind, at=rfc3339(ev.at), session_id=ev.session_id,
        exit=ev.exit, outcome=ev.outcome, holders=list(ev.holders),
    )  # fmt: skip


class JobHandlers(Domain):
    name = "jobs"

    def __init__(self, svc: Service, *, view: ClaimView) -> None:
        super().__init__(svc)
        self.book = svc.state.jobs
        self.view = view
        """Who holds a job's resources (the claims' one view: the fleet's for a fleet-wide key)."""
        self._ended: list[str] = []  # runs that ended since the last wake
        self.book.on_end = self._ended.append
        self._waiters: dict[str, anyio.Event] = {}

    # --- hooks ------------------------------------------------------------------------

    def install(self) -> None:
        self.svc.add(pj.JOB_GET, self.get)
        self.svc.add(pj.JOB_START, self.start, is_async=True)
        self.svc.add(pj.JOB_END, self.end, is_async=True)
        self.svc.add(pj.JOB_DEFER, self.defer, is_async=True)
        self.svc.add(pj.JOB_LIST, self.radar, is_async=True)
        self.svc.add(pj.JOB_WAIT, self.wait, is_async=True, concurrent=True)

    def restore(self, db: sqlite3.Connection) -> None:
        self.book.restore(load_events(db), self._live)

    def sweep(self) -> None:
        if any(st.running is not None for st in self.book.jobs.values()):
            self.book.sweep(self._live)
            self._wake()

    def prune(self, history_days: float) -> None:
        self.book.prune(self.svc.clock.now() - history_days * 86400)

    # --- helpers ----------------------------------------------------------------------

    def _live(self, session_id: str) -> bool:
        return session_id in self.svc.state.registry.sessions

    def _wake(self) -> None:
        """Wake the ``job.wait`` callers of every job whose run ended (after its commit)."""
        names, self._ended[:] = list(self._ended), []
        for name in names:
            ev = self._waiters.pop(name, None)
            if ev is not None:
                ev.set()

    def _specs(self) -> dict[str, JobSpec]:
        return {j.name: j for j in self.svc.state.settings.jobs}

    def _spec(self, name: str) -> JobSpec:
        specs = self._specs()
        if name not in specs:
            known = sorted(specs)
            raise NotFound(
                f"no job named {name!r} is declared"
                + (f"; known jobs: {', '.join(known)}" if known else "; none is declared"),
                {"name": name, "known": known},
            )
        return specs[name]

    # --- methods ----------------------------------------------------------------------

    def get(self, p: pj.JobGetParams, conn: Conn) -> pj.JobDecl:
        j = self._spec(p.name)
        return pj.JobDecl(
            name=j.name, resources=list(j.resources), policy=j.policy, timeout=j.timeout,
            critical=j.critical, once=j.once,
        )  # fmt: skip

    async def _stored(self, ev: JobEvent) -> JobEvent:
        """Store first, then apply: a run the disk refused to record neither starts,
        ends (waking ``job.wait``) nor defers in memory."""
        return await self.svc.store_first([("job.event", ev)], lambda: self._apply(ev))

    def _apply(self, ev: JobEvent) -> JobEvent:
        applied = self.book.apply(ev)
        self._wake()  # a run that ended: its waiters
        return applied

    async def start(self, p: pj.JobStartParams, conn: Conn) -> pj.JobEventResult:
        self._spec(p.name)
        self.svc.state.registry.get(p.session_id)
        return _event(await self._stored(self.book.start_event(p.name, p.session_id)))

    async def end(self, p: pj.JobEndParams, conn: Conn) -> pj.JobEventResult:
        return _event(await self._stored(self.book.end_event(p.name, p.session_id, p.exit)))

    async def defer(self, p: pj.JobDeferParams, conn: Conn) -> pj.JobEventResult:
        spec = self._spec(p.name)
        ev = self.book.defer_event(p.name, p.session_id, spec.policy, p.holders)
        return _event(await self._stored(ev))

    async def radar(self, p: pj.JobListParams, conn: Conn) -> pj.JobListResult:
        specs = self._specs()
        names = sorted(set(specs) | set(self.book.jobs))
        if p.name is not None:
            if p.name not in self.book.jobs:
                self._spec(p.name)
            names = [p.name]
        pending = self.book.pending(specs)
        return pj.JobListResult(jobs=[await self._row(n, specs.get(n), pending) for n in names])

    async def _row(
        self, name: str, spec: JobSpec | None, pending: dict[str, list[JobEvent]]
    ) -> pj.JobRow:
        st = self.book.state(name) if name in self.book.jobs else None
        row = pj.JobRow(name=name, declared=spec is not None)
        if spec is not None:
            row.resources = list(spec.resources)
            row.policy, row.critical, row.once = spec.policy, spec.critical, spec.once
            row.would_wait_for = await self._holders(spec, st)
        if st is not None:
            row.running = _maybe(st.running)
            row.last_start = _maybe(st.last_start)
            row.last_end = _maybe(st.last_end)
            row.deferrals = st.deferrals
            row.pending = [_event(e) for e in pending.get(name, [])]
        return row

    async def _holders(self, spec: JobSpec, st: object) -> list[dict[str, object]]:
        """Who holds the job's resources now (not the job's own running session): on
        this host, and on the others for a fleet-wide key (with its ``host``)."""
        own = getattr(getattr(st, "running", None), "session_id", None)
        found, _, _ = await self.view.holders([from_canonical(r) for r in spec.resources], own)
        out: list[dict[str, object]] = []
        for h in found:
            row: dict[str, object] = {
                "session_id": h.session_id, "resource": h.resource, "mode": h.mode,
                "since": h.since, "reason": h.reason, "task": h.task,
            }  # fmt: skip
            if h.host is not None:
                row["host"] = h.host
            out.append(row)
        return out

    async def wait(self, p: pj.JobWaitParams, conn: Conn) -> pj.JobWaitResult | Later:
        if p.name not in self.book.jobs:
            self._spec(p.name)
        st = self.book.state(p.name)
        if st.running is None:
            return pj.JobWaitResult(
                name=p.name, was_running=False, ended=False, timed_out=False,
                last_end=_maybe(st.last_end),
            )  # fmt: skip
        event = self._waiters.setdefault(p.name, anyio.Event())
        limit = min(p.timeout, self.svc.state.settings.max_query_timeout)
        return Later.running(self._until_ended(p.name, event, limit))

    async def _until_ended(self, name: str, event: anyio.Event, limit: float) -> pj.JobWaitResult:
        """The rest of ``job.wait``: until the run ends or ``limit`` seconds pass."""
        with anyio.move_on_after(limit):
            await event.wait()
        st = self.book.state(name)
        ended = st.running is None
        return pj.JobWaitResult(
            name=name, was_running=True, ended=ended, timed_out=not ended,
            last_end=_maybe(st.last_end),
        )  # fmt: skip
