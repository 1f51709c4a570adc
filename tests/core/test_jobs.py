"""The pure jobs book: runs, deferrals of critical jobs, runs whose session died."""

from __future__ import annotations

import pytest

from meshd.core.clock import ManualClock
from meshd.core.work.jobs import JobBook, JobSpec

SPECS = {
    "backup": JobSpec("backup", ("file:/p",), "wait", 60.0, critical=True),
    "watchdog": JobSpec("watchdog", ("res:gpu",), "skip"),
}
HOLDER = {"session_id": "cli:1", "resource": "file:/p", "task": "refactor"}


@pytest.fixture
def book() -> JobBook:
    return JobBook(ManualClock())


class TestRuns:
    def test_start_then_end(self, book: JobBook) -> None:
        """A run is running between its start and its end; the end is the last one."""
        ended: list[str] = []
        book.on_end = ended.append
        book.start("backup", "run:1")

        assert book.state("backup").running is not None
        book.end("backup", "run:1", 0)

        st = book.state("backup")
        assert st.running is None
        assert st.last_end is not None
        assert (st.last_end.exit, st.last_end.outcome) == (0, "ok")
        assert ended == ["backup"]
        assert [w[1].kind for w in book.writes] == ["start", "end"]

    def test_failed_run(self, book: JobBook) -> None:
        book.start("backup", "run:1")
        book.end("backup", "run:1", 3)

        assert book.state("backup").last_end.outcome == "failed"  # type: ignore[union-attr]

    def test_a_run_whose_session_is_gone_ends_as_died(self, book: JobBook) -> None:
        """kill -9 of `job run` and COMMAND: the sweep closes the run and wakes waiters."""
        ended: list[str] = []
        book.on_end = ended.append
        book.start("backup", "run:1")

        assert book.sweep(lambda sid: True) == []
        assert book.sweep(lambda sid: False) == ["backup"]

        st = book.state("backup")
        assert st.running is None
        assert st.last_end is not None
        assert st.last_end.outcome == "died"
        assert st.last_end.exit is None
        assert ended == ["backup"]


class TestDeferrals:
    def test_critical_deferrals_stay_pending_until_a_success(self, book: JobBook) -> None:
        """Never silent: pending after deferrals and a failed run; cleared by exit 0."""
        book.defer("backup", "run:1", "wait", [HOLDER])
        book.defer("backup", "run:2", "wait", [HOLDER])
        book.start("backup", "run:3")
        book.end("backup", "run:3", 1)

        pending = book.pending(SPECS)
        assert [e.session_id for e in pending["backup"]] == ["run:1", "run:2"]
        assert pending["backup"][0].holders == (HOLDER,)

        book.start("backup", "run:4")
        book.end("backup", "run:4", 0)

        assert book.pending(SPECS) == {}
        assert book.state("backup").deferrals == 2

    def test_non_critical_deferrals_are_counted_not_pending(self, book: JobBook) -> None:
        book.defer("watchdog", "run:1", "skip", [HOLDER])

        assert book.pending(SPECS) == {}
        assert book.state("watchdog").deferrals == 1


class TestRestore:
    def test_restore_rebuilds_and_closes_dead_runs(self) -> None:
        """Stored events rebuild the book; a run left open by a crash ends as died."""
        first = JobBook(ManualClock())
        first.defer("backup", "run:1", "wait", [HOLDER])
        first.start("backup", "run:2")
        events = [w[1] for w in first.writes]

        again = JobBook(ManualClock())
        again.restore(events, live=lambda sid: False)

        st = again.state("backup")
        assert st.running is None
        assert st.last_end is not None
        assert st.last_end.outcome == "died"
        assert [e.session_id for e in again.pending(SPECS)["backup"]] == ["run:1"]
        assert [w[1].outcome for w in again.writes] == ["died"]
