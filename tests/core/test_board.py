"""The pure board: changed-file rows and the per-writer, per-project coalescing window."""

from __future__ import annotations

import pytest

from meshd.core.clock import ManualClock
from meshd.core.work.board import COALESCE_WINDOW, FRAMING, SAMPLE, BoardState

P = "/home/u/proj"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def board(clock: ManualClock) -> BoardState:
    return BoardState(clock, window=10.0)


def everyone(_: str) -> bool:
    return True


class TestCoalescing:
    def test_first_report_is_told_at_once(self, board: BoardState) -> None:
        out = board.report("A", P, [f"{P}/src/a.py"], "fix", ["B"])

        assert out.notice is not None
        assert out.notice.recipients == ("B",)
        assert out.notice.count == 1
        assert out.notice.text == "A changed src/a.py — fix"
        assert out.held == ()

    def test_reports_in_the_quiet_period_are_told_once_with_the_total(
        self, board: BoardState, clock: ManualClock
    ) -> None:
        """Three quick reports: one notice now, one total when the window ends."""
        first = board.report("A", P, [f"{P}/src/a.py"], "", ["B"])
        clock.advance(1)
        second = board.report("A", P, [f"{P}/src/x/{i}.py" for i in range(30)], "", ["B"])
        clock.advance(1)
        third = board.report("A", P, [f"{P}/src/y/{i}.py" for i in range(7)], "tests", ["C"])

        assert first.notice is not None
        assert second.notice is None
        assert third.notice is None
        assert third.held == ("C",)
        assert board.pending("A", P) == 37
        assert board.sweep(everyone) == []  # still quiet

        clock.advance(8)
        (total,) = board.sweep(everyone)

        assert total.count == 37
        assert total.text == "A changed 37 files under src/ — tests"
        assert total.recipients == ("B", "C")
        assert len(total.paths) == SAMPLE
        assert board.sweep(everyone) == []  # told once

    def test_flush_opens_a_new_quiet_period(self, board: BoardState, clock: ManualClock) -> None:
        board.report("A", P, [f"{P}/a"], "", ["B"])
        board.report("A", P, [f"{P}/b"], "", ["B"])
        clock.advance(10)
        assert len(board.sweep(everyone)) == 1

        again = board.report("A", P, [f"{P}/c"], "", ["B"])

        assert again.notice is None
        assert again.held == ("B",)

    def test_after_a_quiet_window_with_nothing_pending_the_next_is_told(
        self, board: BoardState, clock: ManualClock
    ) -> None:
        board.report("A", P, [f"{P}/a"], "", ["B"])
        clock.advance(10)
        assert board.sweep(everyone) == []

        assert board.report("A", P, [f"{P}/b"], "", ["B"]).notice is not None

    def test_a_report_before_the_sweep_takes_the_pending_total(
        self, board: BoardState, clock: ManualClock
    ) -> None:
        board.report("A", P, [f"{P}/a"], "", ["B"])
        board.report("A", P, [f"{P}/b", f"{P}/c"], "", ["B"])
        clock.advance(11)

        out = board.report("A", P, [f"{P}/d"], "", ["B"])

        assert out.notice is not None
        assert out.notice.count == 3
        assert board.sweep(everyone) == []

    def test_per_writer_and_project(self, board: BoardState) -> None:
        a = board.report("A", P, [f"{P}/a"], "", ["X"])
        other_writer = board.report("B", P, [f"{P}/a"], "", ["X"])
        other_project = board.report("A", "/srv/other", ["/srv/other/a"], "", ["X"])

        assert a.notice
        assert other_writer.notice
        assert other_project.notice

    def test_nobody_to_tell_opens_no_window(self, board: BoardState) -> None:
        alone = board.report("A", P, [f"{P}/a"], "", [])
        later = board.report("A", P, [f"{P}/b"], "", ["B"])

        assert alone.notice is None
        assert alone.held == ()
        assert later.notice is not None
        assert later.notice.count == 1

    def test_writer_is_never_told(self, board: BoardState) -> None:
        out = board.report("A", P, [f"{P}/a"], "", ["A"])

        assert out.notice is None

    def test_gone_recipients_are_dropped_at_the_flush(
        self, board: BoardState, clock: ManualClock
    ) -> None:
        board.report("A", P, [f"{P}/a"], "", ["B"])
        board.report("A", P, [f"{P}/b"], "", ["B", "C"])
        clock.advance(10)

        (n,) = board.sweep(lambda sid: sid != "B")

        assert n.recipients == ("C",)

    def test_default_window_is_thirty_seconds(self, clock: ManualClock) -> None:
        board = BoardState(clock)
        board.report("A", P, [f"{P}/a"], "", ["B"])
        board.report("A", P, [f"{P}/b"], "", ["B"])
        clock.advance(COALESCE_WINDOW - 0.5)
        assert board.sweep(everyone) == []
        clock.advance(0.5)
        assert len(board.sweep(everyone)) == 1


class TestRecords:
    def test_each_path_is_a_write(self, board: BoardState, clock: ManualClock) -> None:
        board.report("A", P, [f"{P}/a", f"{P}/b"], "s", [])

        ((kind, rows),) = board.drain()

        assert kind == "board.changed"
        assert [(r.path, r.project, r.session_id, r.at, r.summary) for r in rows] == [
            (f"{P}/a", P, "A", clock.now(), "s"),
            (f"{P}/b", P, "A", clock.now(), "s"),
        ]
        assert board.drain() == []

    def test_prune_ignores_a_wall_clock_step(self, board: BoardState, clock: ManualClock) -> None:
        """A +40-day wall-clock step does not age the stored changes."""
        start = clock.now()
        clock.step(40 * 86400)
        board.prune(30)

        assert board.drain() == [("board.prune", start - 30 * 86400)]

    def test_prune_write(self, board: BoardState, clock: ManualClock) -> None:
        board.prune(30)

        assert board.drain() == [("board.prune", clock.now() - 30 * 86400)]

    def test_payload_is_framed(self, board: BoardState) -> None:
        out = board.report("A", P, [f"{P}/a.py", f"{P}/b.py"], "", ["B"])
        assert out.notice is not None

        p = out.notice.event("B", "2026-01-01T00:00:00Z")

        assert (p.session_id, p.from_, p.count) == ("B", "A", 2)
        assert p.framing == FRAMING
        assert "not from the user" in p.framing
        assert p.text == f"A changed 2 files under {P}/"
