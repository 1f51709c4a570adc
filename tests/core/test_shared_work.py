"""The pure cores of shared work (SPEC §7): notebook, signals, ledger, board marks."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshd.core.clock import ManualClock
from meshd.core.work.ledger import Ledger, LedgerRefused
from meshd.core.work.marks import READ_FRESH, Marks
from meshd.core.work.notes import Notebook, Reader, visible
from meshd.core.work.signals import SignalBoard
from meshd.protocol.errors import Forbidden, NotFound, TooLarge


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def who(sid: str | None, reg: str = "r1") -> Reader | None:
    """``sid``'s live registration ``reg`` (None: a reader that acts for no session)."""
    return None if sid is None else Reader(sid, reg)


class TestNotebook:
    def test_shared_notes_are_read_by_all_private_only_by_their_author(
        self, clock: ManualClock
    ) -> None:
        """B reads A's shared note and never A's private one; A reads both."""
        nb = Notebook(clock)
        nb.add(Reader("A", "r1"), "API base is /v2", private=False, limit=100)
        nb.add(Reader("A", "r1"), "my hunch", private=True, limit=100)

        by_b = [n.text for n in nb.read(who("B"))]
        by_a = [n.text for n in nb.read(who("A"))]
        by_nobody = [n.text for n in nb.read(None)]

        assert by_b == ["API base is /v2"]
        assert by_a == ["API base is /v2", "my hunch"]
        assert by_nobody == ["API base is /v2"]

    def test_a_private_note_is_its_registrations_not_its_ids(self, clock: ManualClock) -> None:
        """A later session under the same id (another registration) never reads it."""
        nb = Notebook(clock)
        nb.add(Reader("A", "first"), "my hunch", private=True, limit=100)

        assert [n.text for n in nb.read(Reader("A", "first"))] == ["my hunch"]
        assert nb.read(Reader("A", "second")) == []

    @given(
        st.lists(
            st.tuples(
                st.sampled_from("ABC"), st.booleans(), st.integers(0, 9), st.sampled_from("12")
            ),
            max_size=30,
        ),
        st.sampled_from([Reader(s, r) for s in "ABC" for r in "12"] + [None]),
        st.sampled_from(["A", "B", "C", None]),
    )
    # Generation speed depends on the machine's load (-n 4 on 2 cores failed it once).
    @settings(suppress_health_check=[HealthCheck.too_slow])
    def test_no_reader_ever_gets_a_private_note_of_another(
        self,
        notes: list[tuple[str, bool, int, str]],
        reader: Reader | None,
        author: str | None,
    ) -> None:
        """Whatever the notebook and the filter, a private note reaches the registration
        that wrote it only."""
        nb = Notebook(ManualClock())
        for sid, private, i, reg in notes:
            nb.add(Reader(sid, reg), f"{sid}-{i}", private=private, limit=100)

        got = nb.read(reader, author=author)
        me = None if reader is None else (reader.session_id, reader.reg)

        assert all(not n.private or (n.author, n.reg) == me for n in got)
        assert len(got) == sum(
            1 for n in nb.notes.values() if visible(n, reader) and author in (None, n.author)
        )

    @given(
        st.lists(st.tuples(st.sampled_from("AB"), st.booleans()), max_size=40),
        st.sets(st.integers(1, 40), max_size=10),
        st.sampled_from([Reader("A", "1"), Reader("B", "1"), None]),
        st.sampled_from(["A", "B", None]),
        st.integers(1, 45),
    )
    @settings(suppress_health_check=[HealthCheck.too_slow])
    def test_a_limited_read_is_the_newest_of_the_whole_read_oldest_first(
        self,
        notes: list[tuple[str, bool]],
        removed: set[int],
        reader: Reader | None,
        author: str | None,
        limit: int,
    ) -> None:
        """The walk from the newest end gives what slicing the whole read gave, also
        after removals and a removal put back (which re-sorts the notebook)."""
        nb = Notebook(ManualClock())
        for i, (sid, private) in enumerate(notes):
            nb.add(Reader(sid, "1"), f"{sid}-{i}", private=private, limit=100)
        for note_id in sorted(removed):
            note = nb.notes.get(note_id)
            if note is not None:
                nb.remove(Reader(note.author, "1"), note_id)
                if note_id % 3 == 0:
                    nb.put_back(note)

        whole = nb.read(reader, author=author)

        assert nb.read(reader, author=author, limit=limit) == whole[-limit:]

    def test_a_limited_read_looks_at_the_newest_notes_only(
        self, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``notes.list`` of the newest 3 of 1,000 notes looks at 3 of them, not at the
        whole notebook: the read runs on the daemon's loop, and notebooks are never
        pruned, so a scan of all of them grows without bound."""
        import meshd.core.work.notes as notes_module

        nb = Notebook(clock)
        for i in range(1000):
            nb.add(Reader("A", "1"), f"note {i}", private=False, limit=100)
        looks = 0

        def counted(note: notes_module.Note, reader: Reader | None) -> bool:
            nonlocal looks
            looks += 1
            return visible(note, reader)

        monkeypatch.setattr(notes_module, "visible", counted)

        got = nb.read(Reader("B", "1"), limit=3)

        assert [n.text for n in got] == ["note 997", "note 998", "note 999"]
        assert looks == 3

    def test_too_long_is_refused_and_nothing_is_written(self, clock: ManualClock) -> None:
        nb = Notebook(clock)

        with pytest.raises(TooLarge):
            nb.add(Reader("A", "r1"), "é" * 6, private=False, limit=10)

        assert nb.notes == {}
        assert nb.drain() == []

    def test_notes_are_never_pruned_by_age(self, clock: ManualClock) -> None:
        """SPEC §2: notes are kept until deleted; history_days does not touch them."""
        nb = Notebook(clock)
        nb.add(Reader("A", "r1"), "old", private=False, limit=100)
        clock.advance(400 * 86400)

        assert not hasattr(nb, "prune")
        assert [n.text for n in nb.read(who("A"))] == ["old"]

    def test_the_author_removes_a_note_and_the_removal_is_a_write(self, clock: ManualClock) -> None:
        nb = Notebook(clock)
        note = nb.add(Reader("A", "r1"), "x", private=False, limit=100)
        nb.drain()

        gone = nb.remove(Reader("A", "r1"), note.id)

        assert gone == note
        assert nb.read(who("A")) == []
        assert nb.drain() == [("note.rm", note)]

    def test_only_the_author_removes_and_a_private_note_stays_unseen(
        self, clock: ManualClock
    ) -> None:
        nb = Notebook(clock)
        shared = nb.add(Reader("A", "r1"), "x", private=False, limit=100)
        private = nb.add(Reader("A", "r1"), "y", private=True, limit=100)
        nb.drain()

        with pytest.raises(Forbidden):
            nb.remove(Reader("B", "r2"), shared.id)
        with pytest.raises(NotFound):
            nb.remove(Reader("B", "r2"), private.id)
        with pytest.raises(NotFound):
            nb.remove(Reader("A", "r3"), private.id)  # a later registration under A's id

        assert len(nb.notes) == 2
        assert nb.drain() == []

    def test_ids_go_on_above_restored_ones(self, clock: ManualClock) -> None:
        first = Notebook(clock)
        first.add(Reader("A", "r1"), "x", private=False, limit=100)
        again = Notebook(clock)
        again.restore(first.notes.values())

        note = again.add(Reader("A", "r1"), "y", private=False, limit=100)

        assert note.id == 2


class TestSignals:
    def test_each_name_counts_on_its_own(self, clock: ManualClock) -> None:
        sb = SignalBoard(clock)

        seqs = [sb.emit(n, "null", "A").seq for n in ("a", "a", "b", "a")]

        assert seqs == [1, 2, 1, 3]

    def test_a_late_waiter_sees_an_earlier_emit(self, clock: ManualClock) -> None:
        sb = SignalBoard(clock)
        sb.emit("research-done", '{"rows": 10}', "A")
        clock.advance(30)

        sig = sb.find("research-done", after=None, since=None)

        assert sig is not None
        assert (sig.seq, sig.payload, sig.emitted_by) == (1, '{"rows": 10}', "A")

    def test_after_waits_for_a_newer_one(self, clock: ManualClock) -> None:
        sb = SignalBoard(clock)
        sb.emit("x", "null", None)

        assert sb.find("x", after=1, since=None) is None
        sb.emit("x", "null", None)
        assert sb.find("x", after=1, since=None) is not None

    def test_since_takes_only_recent_emits(self, clock: ManualClock) -> None:
        sb = SignalBoard(clock)
        sb.emit("x", "null", None)
        clock.advance(120)

        assert sb.find("x", after=None, since=60) is None
        assert sb.find("x", after=None, since=180) is not None

    def test_pruning_keeps_the_counter(self, clock: ManualClock) -> None:
        sb = SignalBoard(clock)
        sb.emit("x", "null", None)
        clock.advance(2 * 86400)
        sb.prune(history_days=1)

        assert sb.find("x", after=None, since=None) is None
        assert sb.emit("x", "null", None).seq == 2


def alive(*sids: str):  # type: ignore[no-untyped-def]
    return lambda sid: sid in sids


class TestLedger:
    def test_first_reserves_the_second_is_told_running(self, clock: ManualClock) -> None:
        led = Ledger(clock)

        first = led.reserve("daily", "A", alive("A", "B"), ttl=None, note="")
        second = led.reserve("daily", "B", alive("A", "B"), ttl=None, note="")

        assert first.status == "reserved"
        assert (second.status, second.entry.session_id) == ("running", "A")
        assert led.drain() == [("ledger.put", first.entry)]

    def test_done_stays_done_free_lets_the_next_run(self, clock: ManualClock) -> None:
        led = Ledger(clock)
        live = alive("A", "B")
        led.reserve("k", "A", live, ttl=None, note="")
        led.finish("k", "A", "done")
        led.reserve("j", "A", live, ttl=None, note="")
        led.finish("j", "A", "free")

        assert led.reserve("k", "B", live, ttl=None, note="").status == "done"
        assert led.reserve("j", "B", live, ttl=None, note="").status == "reserved"

    def test_a_runner_that_is_gone_leaves_unknown_for_good(self, clock: ManualClock) -> None:
        """A dead runner's key is unknown: nobody runs it, and its finish changes nothing."""
        led = Ledger(clock)
        led.reserve("pay", "A", alive("A"), ttl=None, note="")

        turned = led.sweep(alive())
        again = led.reserve("pay", "B", alive("B"), ttl=None, note="")
        late = led.finish("pay", "A", "done")

        assert [e.key for e in turned] == ["pay"]
        assert again.status == "unknown"
        assert late is not None
        assert late.state == "unknown"

    def test_resolve_settles_unknown_but_never_a_live_running_key(self, clock: ManualClock) -> None:
        led = Ledger(clock)
        led.reserve("a", "A", alive("A"), ttl=None, note="")
        led.reserve("b", "B", alive("B"), ttl=None, note="")
        led.sweep(alive("A"))

        with pytest.raises(LedgerRefused):
            led.resolve("a", "free", "person", alive("A"))
        before = led.resolve("b", "free", "person", alive("A"))

        assert before is not None
        assert before.state == "unknown"
        assert led.reserve("b", "C", alive("C"), ttl=None, note="").status == "reserved"

    def test_done_with_ttl_is_forgotten_after_it(self, clock: ManualClock) -> None:
        led = Ledger(clock)
        live = alive("A", "B")
        led.reserve("hourly", "A", live, ttl=3600, note="")
        led.finish("hourly", "A", "done")
        clock.advance(3599)
        assert led.reserve("hourly", "B", live, ttl=3600, note="").status == "done"
        clock.advance(1)

        assert led.reserve("hourly", "B", live, ttl=3600, note="").status == "reserved"

    def test_finish_by_another_session_changes_nothing(self, clock: ManualClock) -> None:
        led = Ledger(clock)
        led.reserve("k", "A", alive("A"), ttl=None, note="")
        led.drain()

        entry = led.finish("k", "B", "free")

        assert entry is not None
        assert (entry.state, entry.session_id) == ("running", "A")
        assert led.drain() == []


class TestMarks:
    def test_watch_and_read_overlap_both_ways(self, clock: ManualClock) -> None:
        m = Marks(clock)
        m.touch("W", ["/p/src"], "watch")
        m.touch("R", ["/p/src/a.py"], "read")
        m.touch("X", ["/p/docs"], "watch")

        assert m.overlapping(["/p/src/a.py"]) == {"W": "watch", "R": "read"}
        assert m.overlapping(["/p"]) == {"W": "watch", "R": "read", "X": "watch"}
        assert m.overlapping(["/p/srcx"]) == {}

    def test_an_old_read_draws_no_notice_a_watch_lasts(self, clock: ManualClock) -> None:
        m = Marks(clock)
        m.touch("R", ["/p/a"], "read")
        m.touch("W", ["/p/a"], "watch")
        clock.advance(READ_FRESH + 1)

        assert m.overlapping(["/p/a"]) == {"W": "watch"}

    def test_marks_of_sessions_gone_are_dropped(self, clock: ManualClock) -> None:
        m = Marks(clock)
        m.touch("A", ["/p/a"], "watch")
        m.touch("B", ["/p/a"], "watch")
        m.drain()

        m.sweep(alive("B"))

        assert m.overlapping(["/p/a"]) == {"B": "watch"}
        assert m.drain() == [("board.unmark", "A")]

    def test_untouch_and_put_back(self, clock: ManualClock) -> None:
        """A stopped watch draws nothing; a refused change is put back as it was."""
        m = Marks(clock)
        m.touch("W", ["/p/a", "/p/b"], "watch")
        before = dict(m.by_session["W"])
        m.drain()

        stopped = m.untouch("W", ["/p/a", "/p/zzz"], "watch")
        after_stop = m.overlapping(["/p/a"])
        m.put_back("W", before)

        assert stopped == 1
        assert after_stop == {}
        assert m.overlapping(["/p/a"]) == {"W": "watch"}
        assert m.drain() == [("board.unmark_path", "W", "/p/a", "watch")]
