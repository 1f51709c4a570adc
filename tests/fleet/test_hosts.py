"""The other hosts' entries on this host's clock (meshd.fleet.hosts; pure, ManualClock):
a host that stops rewriting its entry is shown stale first, then dropped."""

from __future__ import annotations

from meshd.core.clock import ManualClock
from meshd.fleet.hosts import DROP_INTERVALS, STALE_INTERVALS, FleetHosts, HostEntry
from meshd.protocol import methods as m


def info(sid: str, *, age: float = 1.0, stale: bool = False) -> m.SessionInfo:
    return m.SessionInfo(
        session_id=sid, profile="p", source="cli", status="idle", task="t", cwd=None,
        repo=None, branch=None, pid=1, host="whatever", last_heartbeat="", age_s=age,
        stale=stale, liveness="process",
    )  # fmt: skip


def entry(host: str, *sids: str, interval: float = 5.0, instance: str = "i") -> HostEntry:
    return HostEntry(
        host=host, instance=instance, version="v", interval=interval,
        sessions=[info(s) for s in sids],
    )  # fmt: skip


def test_sessions_carry_their_host_and_age_on_from_the_read() -> None:
    clock = ManualClock()
    hosts = FleetHosts(clock, "me")
    hosts.seen(entry("vps", "gateway:tg"), revision=7, instance="mine")
    clock.advance(2)

    (s,) = hosts.sessions()
    assert (s.session_id, s.host, s.age_s, s.stale) == ("gateway:tg", "vps", 3.0, False)
    assert hosts.host_of("gateway:tg") == "vps"
    assert hosts.host_of("nobody") is None


def test_a_host_that_stops_rewriting_is_stale_then_dropped() -> None:
    clock = ManualClock()
    hosts = FleetHosts(clock, "me")
    hosts.seen(entry("home", "cron:x", interval=1.0), revision=1, instance="mine")

    clock.advance(STALE_INTERVALS - 0.1)
    hosts.seen(entry("home", "cron:x", interval=1.0), revision=1, instance="mine")  # unchanged
    assert [s.stale for s in hosts.sessions()] == [False]
    clock.advance(0.2)
    assert [s.stale for s in hosts.sessions()] == [True]
    assert hosts.sessions(fresh=True) == []
    clock.advance(DROP_INTERVALS - STALE_INTERVALS)
    assert hosts.sessions() == []
    assert hosts.hosts == {}


def test_a_new_revision_is_fresh_again() -> None:
    clock = ManualClock()
    hosts = FleetHosts(clock, "me")
    hosts.seen(entry("home", "cron:x", interval=1.0), revision=1, instance="mine")
    clock.advance(STALE_INTERVALS + 0.5)
    hosts.seen(entry("home", "cron:x", interval=1.0), revision=2, instance="mine")

    assert [s.stale for s in hosts.sessions()] == [False]


def test_a_session_stale_at_its_host_stays_stale() -> None:
    clock = ManualClock()
    hosts = FleetHosts(clock, "me")
    e = entry("vps")
    e.sessions = [info("gateway:tg", stale=True)]
    hosts.seen(e, revision=1, instance="mine")

    assert [s.stale for s in hosts.sessions()] == [True]


def test_entries_gone_from_the_bucket_are_dropped_at_once() -> None:
    hosts = FleetHosts(ManualClock(), "me")
    hosts.seen(entry("a", "s1"), revision=1, instance="mine")
    hosts.seen(entry("b", "s2"), revision=2, instance="mine")

    hosts.present({"b"})
    assert [s.session_id for s in hosts.sessions()] == ["s2"]


def test_own_entry_is_skipped_and_a_name_clash_noticed() -> None:
    hosts = FleetHosts(ManualClock(), "me")
    hosts.seen(entry("me", "s1", instance="mine"), revision=1, instance="mine")
    assert (hosts.hosts, hosts.clashes) == ({}, set())

    hosts.seen(entry("me", "s9", instance="theirs"), revision=2, instance="mine")
    assert hosts.clashes == {"theirs"}
    assert hosts.sessions() == []
