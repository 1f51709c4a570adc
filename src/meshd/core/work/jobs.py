"""Declared jobs (SPEC §7 "Jobs"): runs, deferrals and the radar. Pure.

A job is declared in ``config.toml`` (``[jobs.NAME]``: its resources, ``wait`` or
``skip``, a timeout, ``critical``, ``once``); :class:`JobSpec` is that
declaration. ``meshctl job run NAME -- COMMAND`` tells the daemon what happens
to each run: it *started* (under its own short-lived session), *ended* (with
COMMAND's exit status), or was *deferred* (its resources were held; who held
what). This module keeps, per job, the run in progress, the last finished run,
and the deferrals since the job last succeeded:

* A deferred **critical** job is never silent: its deferrals stay pending (shown
  by ``meshctl jobs`` and ``sync``) until a run of that job exits 0.
* A run whose session is gone without an end (``kill -9`` of ``job run`` and
  COMMAND) is closed as ``died`` by :meth:`JobBook.sweep`, which the daemon's
  sweeper calls with the set of live sessions; waiters on that job are woken.

Everything that must be stored is left in :attr:`JobBook.writes` as
``("job.event", JobEvent)`` and ``("job.prune", cutoff)``; the book is rebuilt
from the stored events at start (:meth:`JobBook.restore`). The clock is injected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

import msgspec

from meshd.core.clock import Clock

Policy = Literal["wait", "skip"]
Once = Literal["daily", "hourly", ""]
Kind = Literal["start", "end", "defer"]
Write = tuple[Any, ...]


class JobSpec(msgspec.Struct, frozen=True):
    """One ``[jobs.NAME]`` table, as validated by the config loader."""

    name: str
    resources: tuple[str, ...]
    policy: Policy = "wait"
    timeout: float = 900.0
    critical: bool = False
    once: Once = ""


class JobEvent(msgspec.Struct, frozen=True):
    """What happened to one run of a job; the stored row."""

    name: str
    kind: Kind
    at: float
    session_id: str
    exit: int | None = None
    outcome: str = ""  # end: "ok", "failed", "died"; defer: the policy that deferred
    holders: tuple[dict[str, Any], ...] = ()


class JobState(msgspec.Struct):
    """What the radar shows of one job (declared or not: an undeclared name has no spec)."""

    running: JobEvent | None = None  # its start event
    last_start: JobEvent | None = None
    last_end: JobEvent | None = None
    #: deferrals since the last success
    pending: list[JobEvent] = msgspec.field(default_factory=list)
    deferrals: int = 0  # deferrals seen in total (since the history was pruned)


class JobBook:
    """Every job's runs and deferrals; fed by ``job.*`` calls and the sweeper.

    (A plain class: as a dataclass it cost every daemon start 0.3 ms to build.)
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.jobs: dict[str, JobState] = {}
        self.writes: list[Write] = []
        #: called with a job's name when its run ends (the daemon wakes ``job.wait`` waiters)
        self.on_end: Callable[[str], None] = lambda name: None

    def state(self, name: str) -> JobState:
        return self.jobs.setdefault(name, JobState())

    def start(self, name: str, session_id: str) -> JobEvent:
        """A run of ``name`` began under ``session_id`` (after its claims were granted)."""
        return self._record(self.start_event(name, session_id))

    def end(self, name: str, session_id: str, exit: int) -> JobEvent:
        """The run under ``session_id`` ended with ``exit``; 0 clears pending deferrals."""
        return self._record(self.end_event(name, session_id, exit))

    def defer(
        self, name: str, session_id: str, policy: str, holders: Iterable[dict[str, Any]]
    ) -> JobEvent:
        """A run of ``name`` did not start: its resources were held by ``holders``."""
        return self._record(self.defer_event(name, session_id, policy, holders))

    # The events alone, changing nothing: the daemon stores one *first*, then applies
    # it (:meth:`apply`), so a write the disk refused changes nothing (and wakes no one).

    def start_event(self, name: str, session_id: str) -> JobEvent:
        return JobEvent(name, "start", self.clock.now(), session_id)

    def end_event(self, name: str, session_id: str, exit: int) -> JobEvent:
        outcome = "ok" if exit == 0 else "failed"
        return JobEvent(name, "end", self.clock.now(), session_id, exit, outcome)

    def defer_event(
        self, name: str, session_id: str, policy: str, holders: Iterable[dict[str, Any]]
    ) -> JobEvent:
        return JobEvent(name, "defer", self.clock.now(), session_id, None, policy, tuple(holders))

    def apply(self, ev: JobEvent) -> JobEvent:
        """Apply an event that is already stored (no write recorded)."""
        self._apply(ev)
        return ev

    def _record(self, ev: JobEvent) -> JobEvent:
        self._apply(ev)
        self.writes.append(("job.event", ev))
        return ev

    def sweep(self, live: Callable[[str], bool]) -> list[str]:
        """Close runs whose session is gone without an end, as ``died``; their names."""
        closed = []
        for name, st in self.jobs.items():
            run = st.running
            if run is not None and not live(run.session_id):
                ev = JobEvent(name, "end", self.clock.now(), run.session_id, None, "died")
                self._apply(ev)
                self.writes.append(("job.event", ev))
                closed.append(name)
        return closed

    def pending(self, specs: dict[str, JobSpec]) -> dict[str, list[JobEvent]]:
        """Deferrals of *critical* jobs not yet followed by a success (never silent)."""
        return {
            name: list(st.pending)
            for name, st in self.jobs.items()
            if st.pending and name in specs and specs[name].critical
        }

    def restore(self, events: Iterable[JobEvent], live: Callable[[str], bool]) -> None:
        """Rebuild from stored events, oldest first; runs whose session is gone end ``died``."""
        for ev in events:
            self._apply(ev, wake=False)
        self.sweep(live)

    def prune(self, cutoff: float) -> None:
        """Forget stored events older than ``cutoff`` (wall time); the book keeps its summary."""
        self.writes.append(("job.prune", cutoff))

    def _apply(self, ev: JobEvent, *, wake: bool = True) -> None:
        st = self.state(ev.name)
        if ev.kind == "start":
            st.running = ev
            st.last_start = ev
        elif ev.kind == "end":
            if st.running is not None and st.running.session_id == ev.session_id:
                st.running = None
            st.last_end = ev
            if ev.exit == 0:
                st.pending.clear()
            if wake:
                self.on_end(ev.name)
        else:
            st.deferrals += 1
            st.pending.append(ev)
