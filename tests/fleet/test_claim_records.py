"""The fleet's claim records and conflict rule (meshd.fleet.claim_records), pure."""

from __future__ import annotations

from meshd.fleet.claim_records import (
    Entry,
    Record,
    Seen,
    blockers,
    plan,
    record_name,
    record_resource,
    resource_of,
    shared_root,
)
from meshd.keys import from_canonical


def never(e: Entry) -> bool:
    return False


A = Entry("g1", "s1", "h1", "exclusive")
B = Entry("g2", "s2", "h2", "exclusive")
SB = Entry("g2", "s2", "h2", "shared")
SC = Entry("g3", "s3", "h3", "shared")


def test_a_record_round_trips_and_garbage_reads_as_empty() -> None:
    r = Record(h=(A,), d=(SB,), q=(Entry("g4", "s4", "h1", "shared", ticket=9),))
    assert Record.decode(r.encode()) == r
    assert Record.decode(None).empty
    assert Record.decode(b"not json").empty
    assert Record.decode(b'{"h": [{"x": 1}]}').empty


def test_holders_clash_unless_both_shared() -> None:
    assert blockers(Record(h=(A,)), "hold", B, never) == [A]
    assert blockers(Record(h=(SB,)), "hold", SC, never) == []
    assert blockers(Record(h=(SB,)), "hold", A, never) == [SB]
    assert blockers(Record(h=(A,)), "hold", A, never) == []  # its own entry
    assert blockers(Record(h=(B,)), "hold", A, lambda e: True) == []  # a related session


def test_holders_below_block_a_hold_not_an_intent() -> None:
    r = Record(d=(B,))
    assert blockers(r, "hold", A, never) == [B]
    assert blockers(r, "intent", A, never) == []
    assert blockers(Record(h=(B,)), "intent", A, never) == [B]


def test_waiters_are_passed_only_by_an_earlier_ticket() -> None:
    w5 = Entry("g5", "s5", "h2", "exclusive", ticket=5)
    r = Record(q=(w5,))
    assert blockers(r, "hold", A, never) == [w5]  # no ticket: behind every waiter
    assert blockers(r, "hold", Entry("g1", "s1", "h1", "exclusive", ticket=7), never) == [w5]
    assert blockers(r, "hold", Entry("g1", "s1", "h1", "exclusive", ticket=3), never) == []
    assert blockers(r, "intent", A, never) == [w5]


def test_record_names_are_valid_kv_keys_and_read_back() -> None:
    for res in ("box:gpu", "file:/srv/a b/ü.py", "res:x.y"):
        name = record_name(res)
        assert name.startswith("k.")
        assert "." not in name[2:]
        assert resource_of(name) == res
    assert resource_of("g.x") is None


def test_file_and_repo_share_one_path_space() -> None:
    assert record_resource(from_canonical("repo:/srv/p")) == "file:/srv/p"
    assert record_resource(from_canonical("box:x")) == "box:x"


def test_shared_root_is_the_outermost_folder_that_holds_the_path() -> None:
    roots = ("/srv/shared/proj", "/srv/shared")
    assert shared_root(from_canonical("file:/srv/shared/proj/a"), roots) == "/srv/shared"
    assert shared_root(from_canonical("file:/srv/shared"), roots) == "/srv/shared"
    assert shared_root(from_canonical("file:/srv/sharedx"), roots) is None
    assert shared_root(from_canonical("box:x"), roots) is None


def test_a_plan_holds_each_key_and_intends_each_folder_above_it_in_one_order() -> None:
    keys = [from_canonical("file:/s/a/b"), from_canonical("box:z"), from_canonical("file:/s/a")]
    steps = plan(keys, ["/s"])
    assert [(s.resource, s.role) for s in steps] == sorted(
        [(s.resource, s.role) for s in steps],
        key=lambda x: (record_name(x[0]), x[1] != "hold"),
    )
    assert {(s.resource, s.role) for s in steps} == {
        ("file:/s/a/b", "hold"),
        ("file:/s/a", "hold"),
        ("file:/s/a", "intent"),
        ("file:/s", "intent"),
        ("box:z", "hold"),
    }
    assert plan(list(reversed(keys)), ["/s"]) == steps  # the same order from any order


def test_seen_keeps_the_newest_version_the_watch_delivers() -> None:
    seen = Seen()
    assert seen.get("k.a") is None
    seen.now("k.a", Record(h=(A,)), 7)  # this host wrote it
    seen.saw("k.a", Record(h=(A,)), 7)  # the watch delivering that same version
    assert seen.get("k.a") == (Record(h=(A,)), 7)
    seen.saw("k.a", Record(h=(B,)), 9)
    assert seen.get("k.a") == (Record(h=(B,)), 9)


def test_seen_drops_a_hint_the_watch_contradicts() -> None:
    """An older version delivered (the watch catching up, or a bucket replaced under a
    link that stayed up: revisions start again), or another record at a revision
    already seen: the hint goes, so the next claim of it reads before it writes."""
    seen = Seen()
    seen.now("k.a", Record(h=(A,)), 7)
    seen.saw("k.a", Record(), 5)
    assert seen.get("k.a") is None
    seen.saw("k.a", Record(h=(A,)), 7)  # the version itself arrives: a hint again
    assert seen.get("k.a") == (Record(h=(A,)), 7)
    seen.saw("k.a", Record(h=(B,)), 7)  # a replaced bucket's record at the same revision
    assert seen.get("k.a") is None


def test_seen_takes_the_watchs_bytes_as_it_takes_records() -> None:
    """The watch hands Seen the bytes it delivered: its own write's version again
    keeps the hint, another record at that revision drops it, a newer one is the
    hint (decoded when a request asks for it)."""
    seen = Seen()
    mine = Record(h=(A,))
    seen.now("k.a", mine, 7, raw=mine.encode())  # this host wrote it
    seen.saw("k.a", mine.encode(), 7)
    assert seen.get("k.a") == (mine, 7)
    seen.saw("k.a", Record(h=(B,)).encode(), 7)  # a replaced bucket's, same revision
    assert seen.get("k.a") is None
    seen.saw("k.a", Record(h=(B,)).encode(), 9)
    assert seen.get("k.a") == (Record(h=(B,)), 9)
    seen.now("k.b", mine, 3)  # a write whose bytes were not kept
    seen.saw("k.b", mine.encode(), 3)
    assert seen.get("k.b") == (mine, 3)
    seen.saw("k.b", b"", 3)  # a delete marker at that revision: not the same
    assert seen.get("k.b") is None


def test_seen_takes_what_the_server_just_said_and_forgets_at_a_link_up() -> None:
    seen = Seen()
    seen.saw("k.a", Record(h=(A,)), 90)
    seen.now("k.a", Record(), 3)  # a read: the bucket was replaced, revisions began again
    assert seen.get("k.a") == (Record(), 3)
    seen.forget()
    assert seen.get("k.a") is None


def test_seen_is_bounded() -> None:
    seen = Seen()
    for n in range(Seen.LIMIT + 5):
        seen.now(f"k.{n}", Record(), n + 1)
    assert seen.get(f"k.{Seen.LIMIT + 4}") is not None
    assert len(seen._by_name) <= Seen.LIMIT


def test_a_write_of_this_host_wakes_at_once_and_its_echo_is_dropped() -> None:
    """A compare-and-set of this host that landed tells ``on_write`` at once (its local
    waiters try again without waiting for the watch), and the watch's delivery of
    that very version is its echo: handled already. An older echo of its own no
    longer drops a newer hint of its own (two writes in a row)."""
    woken: list[str] = []
    seen = Seen()
    seen.on_write = woken.append
    first, second = Record(h=(A,)), Record()
    seen.wrote("k.a", first, 7, first.encode())
    assert woken == ["k.a"]
    seen.wrote("k.a", second, 8, second.encode())
    assert woken == ["k.a", "k.a"]
    assert seen.echo("k.a", first.encode(), 7)  # delivered after the second write landed
    assert seen.get("k.a") == (second, 8)  # kept: not read again before the next claim
    assert seen.echo("k.a", second.encode(), 8)
    assert not seen.echo("k.a", second.encode(), 8)  # an echo comes once


def test_only_the_very_bytes_written_are_an_echo() -> None:
    """Another record at the revision this host wrote (a bucket replaced under a link
    that stayed up) is no echo: it goes through :meth:`Seen.saw` like any delivery;
    nor is anything after a link-up forgot the writes."""
    seen = Seen()
    mine = Record(h=(A,))
    seen.wrote("k.a", mine, 7, mine.encode())
    assert not seen.echo("k.a", Record(h=(B,)).encode(), 7)
    assert not seen.echo("k.a", mine.encode(), 7)  # the first delivery at 7 took it
    seen.wrote("k.b", mine, 9, mine.encode())
    seen.forget()
    assert not seen.echo("k.b", mine.encode(), 9)
    assert seen.get("k.b") is None


def test_an_echo_handled_before_its_acknowledgement_wakes_once() -> None:
    """The watch's delivery of this host's write can be handled before the write's own
    acknowledgement (they come on two connections): it is a delivery like any other
    then, and the acknowledgement that follows wakes nobody again and leaves nothing
    waiting for an echo that already came."""
    woken: list[str] = []
    seen = Seen()
    seen.on_write = woken.append
    mine = Record(h=(A,))
    assert not seen.echo("k.a", mine.encode(), 7)  # not known as ours yet
    seen.saw("k.a", mine.encode(), 7)
    seen.wrote("k.a", mine, 7, mine.encode())  # its acknowledgement, after
    assert woken == []  # (the watch's callback woke the waiters with the delivery)
    assert seen.get("k.a") == (mine, 7)
    assert seen._mine == {}
    seen.saw("k.a", Record().encode(), 7)  # another record at 7: the hint goes
    seen.wrote("k.a", mine, 7, mine.encode())  # then a write of ours is no echo of it
    assert woken == ["k.a"]
