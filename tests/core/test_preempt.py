"""Preemption requests and their grace (SPEC §5b), on a ManualClock."""

from __future__ import annotations

from meshd.core.clock import ManualClock
from meshd.core.work.preempt import Preemptions


def test_grace_expiry_is_handed_over_once() -> None:
    clock = ManualClock()
    pre = Preemptions(clock)
    p = pre.add("boss", {"low": ("res:a",)}, "release build", 300)

    clock.advance(299)
    early = pre.due()
    clock.advance(1)
    due = pre.due()
    again = pre.due()

    assert early == []
    assert [x.id for x in due] == [p.id]
    assert again == []


def test_pausing_satisfies_the_preemption_and_names_its_preemptor() -> None:
    clock = ManualClock()
    pre = Preemptions(clock)
    pre.add("boss", {"low": ("res:a",), "other": ("res:b",)}, "", 300)

    first = pre.paused("low")
    clock.advance(300)
    due = [list(p.holders) for p in pre.due()]
    pre.paused("other")

    assert [p.by for p in first] == ["boss"]
    assert due == [["other"]]  # low paused: only other is still waited on
    assert pre.pending() == []


def test_a_preemptor_that_ends_takes_its_preemptions_along() -> None:
    clock = ManualClock()
    pre = Preemptions(clock)
    pre.add("boss", {"low": ("res:a",)}, "", 300)

    pre.forget("boss")
    clock.advance(301)

    assert pre.due() == []
    assert pre.paused("low") == []
