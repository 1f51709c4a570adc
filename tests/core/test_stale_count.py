"""``Registry.stale_count`` (``mesh.info``'s stale figure) agrees with counting every
session by ``is_stale``, through registrations, heartbeats, ends, restores, undone
registrations, a new ``stale_after`` and sweeps, on an injected clock."""

from __future__ import annotations

import random

import msgspec
import pytest

from meshd.core.clock import ManualClock
from meshd.core.sessions.registry import Registration, Registry
from meshd.core.settings import Settings


def reg(sid: str, liveness: str = "heartbeat") -> Registration:
    return Registration(
        session_id=sid, source="cli", task="", status="idle", model="", provider="",
        pid=1, pid_start=None, host="h", cwd=None,
        repo=None, branch=None, worktree=None, tools=[], parent=None, slot=None,
        kanban_task=None, accept_queries=None, accept_messages=None, liveness=liveness,  # type: ignore[arg-type]
        expire_after=None, bind=False, conn_id=None,
    )  # fmt: skip


def brute(r: Registry, now: float) -> int:
    return sum(1 for s in r.sessions.values() if r.is_stale(s, now))


def test_counts_stale_ones_only() -> None:
    clock = ManualClock()
    r = Registry(clock, Settings(stale_after=20, expire_after=600), "p")
    r.register(reg("a"))
    r.register(reg("b"))
    r.register(reg("p", "process"))
    clock.advance(15)
    r.heartbeat("b")
    clock.advance(6)  # a: 21 s silent; b: 6 s; p: a process session, never stale

    assert r.stale_count(clock.monotonic()) == 1
    r.heartbeat("a")
    assert r.stale_count(clock.monotonic()) == 0
    clock.advance(21)
    assert r.stale_count(clock.monotonic()) == 2
    r.end("b")
    assert r.stale_count(clock.monotonic()) == 1


def test_a_longer_stale_after_counts_again_from_the_sessions() -> None:
    clock = ManualClock()
    r = Registry(clock, Settings(stale_after=20, expire_after=600), "p")
    r.register(reg("a"))
    clock.advance(25)
    assert r.stale_count(clock.monotonic()) == 1

    r.settings = Settings(stale_after=30, expire_after=600)  # a reload
    assert r.stale_count(clock.monotonic()) == 0
    clock.advance(6)
    assert r.stale_count(clock.monotonic()) == 1


def test_an_undone_registration_brings_back_the_stale_one() -> None:
    clock = ManualClock()
    r = Registry(clock, Settings(stale_after=20, expire_after=600), "p")
    old, _ = r.register(reg("a"))
    clock.advance(25)
    assert r.stale_count(clock.monotonic()) == 1
    new, _ = r.register(reg("a"))  # a refresh the store then refuses
    assert r.stale_count(clock.monotonic()) == 0

    r.undo_register(new, old)
    assert r.stale_count(clock.monotonic()) == 1


@pytest.mark.parametrize("seed", range(40))
def test_random_histories_agree_with_counting_every_session(seed: int) -> None:
    rng = random.Random(seed)
    clock = ManualClock()
    r = Registry(clock, Settings(stale_after=20, expire_after=10_000), "p")
    ids = [f"s{i}" for i in range(30)]
    counts = set()
    for _ in range(600):
        op = rng.random()
        sid = rng.choice(ids)
        if op < 0.25:
            before = r.sessions.get(sid)
            new, _ = r.register(reg(sid, "process" if rng.random() < 0.2 else "heartbeat"))
            if rng.random() < 0.1:  # the store refused it
                r.undo_register(new, before)
        elif op < 0.55 and sid in r.sessions:
            r.heartbeat(sid)
        elif op < 0.62 and sid in r.sessions:
            r.end(sid)
        elif op < 0.64:
            r.settings = Settings(stale_after=rng.choice([5, 20, 40]), expire_after=10_000)
        elif op < 0.66 and r.sessions:  # a restart: the sessions come back from the store
            saved = [msgspec.structs.replace(s) for s in r.sessions.values()]
            r = Registry(clock, r.settings, "p")
            r.restore_all(saved)
        elif op < 0.80:
            r.due()  # the sweep, which trims the log
        clock.advance(rng.choice([0.0, 0.5, 1.0, 3.0, 7.0, 15.0]))
        now = clock.monotonic()
        if rng.random() < 0.3:
            counts.add(brute(r, now))
            assert r.stale_count(now) == brute(r, now)
        assert len(r._stale) <= 7 * len(ids)  # a few entries an id, never one a heartbeat
    now = clock.monotonic()
    assert r.stale_count(now) == brute(r, now)
    assert len(counts) > 3  # the histories had stale sessions, and not always the same number


def test_the_log_stays_short_under_steady_heartbeats() -> None:
    """Swept every tick, the log holds a few entries a session."""
    clock = ManualClock()
    r = Registry(clock, Settings(stale_after=20, expire_after=600), "p")
    for i in range(100):
        r.register(reg(f"s{i}"))
    for _ in range(200):  # 1,000 s of heartbeats every 5 s, a sweep every second
        for _tick in range(5):
            clock.advance(1.0)
            r.due()
        for i in range(100):
            r.heartbeat(f"s{i}")

    assert len(r._stale) <= 100 * 5
    assert r.stale_count(clock.monotonic()) == 0


def test_the_log_holds_a_few_entries_a_session_whatever_stale_after() -> None:
    """A long ``stale_after`` (an hour, with heartbeats every 5 s) or a client that
    heartbeats in a loop must not make the log hold an entry per heartbeat: it held
    stale_after / interval of them a session (720 here, ~60 KB a session)."""
    clock = ManualClock()
    r = Registry(clock, Settings(stale_after=3600, expire_after=86_400), "p")
    for i in range(50):
        r.register(reg(f"s{i}"))
    for _ in range(720):  # an hour of heartbeats every 5 s, swept every tick
        clock.advance(5.0)
        r.due()
        for i in range(50):
            r.heartbeat(f"s{i}")
    for _ in range(1000):  # and one client heartbeating in a loop
        r.heartbeat("s0")

    assert len(r._stale) <= 50 * 6
    assert r.stale_count(clock.monotonic()) == 0
    clock.advance(3601)
    assert r.stale_count(clock.monotonic()) == 50


def test_sessions_that_went_stale_and_ended_are_not_kept() -> None:
    """Sessions that went stale and then ended (expired, crashed clients) are forgotten
    though nobody asks for the count: they were kept until ``mesh.info`` was called."""
    clock = ManualClock()
    r = Registry(clock, Settings(stale_after=20, expire_after=600), "p")
    for i in range(100):
        r.register(reg(f"s{i}"))
    clock.advance(25)
    r.due()  # the sweep finds them stale
    for i in range(100):
        r.end(f"s{i}", "expired")
    clock.advance(25)
    r.due()

    assert len(r._stale) == 0
    assert r.stale_count(clock.monotonic()) == 0
