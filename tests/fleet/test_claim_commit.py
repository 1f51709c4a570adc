"""Fleet claims decided on the last version seen, with the commit record sent along
(docs/FLEET.md, "Acquire"; docs/bench-runs/2026-12-01-notebook.md, "Fleet claims, second pass").

A claim no longer reads a record this host has seen before writing it, and a set of
one record sends its commit record beside the record's compare-and-set; a release
sends its writes together. The compare-and-set still decides: two hosts racing for
one key get one grant, a stale version only loses its race, a commit sent beside a
write that lost is never kept, and a release still wakes another host's waiter.
Real nats-server, real meshd per host; no timing asserts.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from tests.fleet.conftest import HostFactory, NatsServer
from tests.fleet.test_claims import Background, acquire, register, release, waiting_on
from tests.support import wait_for


def test_two_hosts_racing_for_one_key_get_exactly_one_grant(fleet_hosts: HostFactory) -> None:
    """Round after round both hosts ask for the same key at once (each has seen its
    record free, the last round's release): one grant, one ``held``, tokens grow."""
    h1, h2 = fleet_hosts(2)
    sids = {h1.name: register(h1), h2.name: register(h2)}
    last = 0

    def ask(h: Any, start: threading.Barrier, got: dict[str, dict[str, Any]]) -> None:
        start.wait()
        got[h.name] = acquire(h, sids[h.name], "box:race")

    for _ in range(12):
        start = threading.Barrier(2)
        got: dict[str, dict[str, Any]] = {}
        threads = [threading.Thread(target=ask, args=(h, start, got)) for h in (h1, h2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        winners = [name for name, r in got.items() if r["status"] == "granted"]
        assert len(winners) == 1, got
        loser = next(name for name in got if name not in winners)
        assert got[loser]["status"] == "held", got
        assert [x["host"] for x in got[loser]["holders"]] == winners
        token = got[winners[0]]["token"]
        assert token > last
        last = token
        host = h1 if winners[0] == h1.name else h2
        release(host, sids[host.name], "box:race")


def test_a_record_seen_free_and_taken_since_is_held(fleet_hosts: HostFactory) -> None:
    """h2 last saw the record free (its own release); h1 takes the key; h2's claim
    is ``held`` by h1 whatever h2 saw, then granted above h1's token once h1 lets go."""
    h1, h2 = fleet_hosts(2)
    a, b = register(h1), register(h2)
    for _ in range(3):
        first = acquire(h2, b, "account:seen")
        assert first["status"] == "granted"
        release(h2, b, "account:seen")
        mine = acquire(h1, a, "account:seen")
        assert mine["status"] == "granted"
        assert mine["token"] > first["token"]
        held = acquire(h2, b, "account:seen")
        assert held["status"] == "held", held
        assert [(x["session_id"], x["host"]) for x in held["holders"]] == [(a, "h1")]
        release(h1, a, "account:seen")
        again = acquire(h2, b, "account:seen")
        assert again["status"] == "granted", again
        assert again["token"] > mine["token"]
        release(h2, b, "account:seen")


def test_releasing_a_set_wakes_waiters_on_each_of_its_keys(fleet_hosts: HostFactory) -> None:
    """A set of two records is released in one go (the commit record's delete and
    both removals sent together): a waiter on another host for each key is granted."""
    h1, h2 = fleet_hosts(2)
    a, b, c = register(h1), register(h2), register(h2)
    held = acquire(h1, a, "box:x", "box:y")
    assert held["status"] == "granted"
    wb = Background(h2, b, "box:x", wait=30)
    wc = Background(h2, c, "box:y", wait=30)
    wait_for(lambda: sorted(waiting_on(h2)) == sorted([b, c]), what="both waiters in line")
    release(h1, a)
    got_b, got_c = wb.result(), wc.result()
    assert got_b["status"] == got_c["status"] == "granted", (got_b, got_c)
    assert got_b["token"] > held["token"]
    assert got_c["token"] > held["token"]
    old = h1.call("claim.validate", {"resource": "box:x", "token": held["token"]})
    assert old["valid"] is False
    assert waiting_on(h2) == []


def in_bucket(server: NatsServer, body: Callable[[Any], Awaitable[None]]) -> None:
    """Run ``body`` with a file-stored KV bucket (history 1, as the claims bucket) on
    ``server``, the connection closed after it."""
    import nats
    from nats.js.api import KeyValueConfig, StorageType

    async def go() -> None:
        nc = await nats.connect(server.url, **server.client_options())
        try:
            kv = await nc.jetstream().create_key_value(
                KeyValueConfig(bucket="commit_test", storage=StorageType.FILE, history=1)
            )
            await body(kv)
        finally:
            await nc.close()

    asyncio.run(go())


def test_a_commit_sent_beside_a_write_that_lost_is_not_kept(nats_server: NatsServer) -> None:
    """The commit record sent along with a record's compare-and-set that lost its
    race is deleted; the token made once the entry is in is above the record's
    revision (a kept one could be below a holder's who came in between)."""
    from nats.js.errors import KeyNotFoundError

    from meshd.fleet.claim_bucket import Commit, read, write
    from meshd.fleet.claim_records import Entry, Record

    async def go(kv: Any) -> None:
        rev = await kv.put("k.a", b"{}")
        other = Record().adding("h", Entry("h9-1", "s9", "h9", "exclusive"))
        moved = await write(kv, "k.a", other, rev)  # someone came in between
        assert moved > rev
        mine = Record().adding("h", Entry("h1-1", "s1", "h1", "exclusive"))
        commit = Commit(kv, "g.h1-1", b"{}", alongside=True)
        assert await commit.with_write(write(kv, "k.a", mine, rev)) == 0  # stale: lost
        assert commit.tried
        record, now = await read(kv, "k.a")
        assert record == other
        try:
            await kv.get("g.h1-1")
        except KeyNotFoundError:
            pass
        else:
            raise AssertionError("the commit sent with the lost write is still there")
        free = await write(kv, "k.a", mine, now)  # the next try lands
        assert free
        token = await commit.token()
        assert token > free > moved
        assert (await kv.get("g.h1-1")).revision == token

    in_bucket(nats_server, go)


def test_a_commit_whose_delete_did_not_land_is_not_adopted(nats_server: NatsServer) -> None:
    """The commit sent beside a write that lost is still there (its delete timed out
    and did not land): the token made once the entry is in is a new version of it,
    above the entry, not the old revision a create would adopt."""
    from meshd.fleet.claim_bucket import Commit, write
    from meshd.fleet.claim_records import Entry, Record

    async def go(kv: Any) -> None:
        rev = await kv.put("k.a", b"{}")
        moved = await write(kv, "k.a", Record(), rev)
        mine = Record().adding("h", Entry("h1-1", "s1", "h1", "exclusive"))
        commit = Commit(kv, "g.h1-1", b"{}", alongside=True)
        assert await commit.with_write(write(kv, "k.a", mine, rev)) == 0
        stale = await kv.put("g.h1-1", b"{}")  # as if the delete had not landed
        free = await write(kv, "k.a", mine, moved)
        assert free > stale
        token = await commit.token()
        assert token > free
        assert (await kv.get("g.h1-1")).revision == token

    in_bucket(nats_server, go)


def test_a_commit_sent_beside_a_write_that_landed_is_the_token(nats_server: NatsServer) -> None:
    """The common case: the commit rides along and its revision is the token, above
    the version the write was decided on."""
    from meshd.fleet.claim_bucket import Commit, write
    from meshd.fleet.claim_records import Entry, Record

    async def go(kv: Any) -> None:
        rev = await kv.put("k.a", b"{}")
        mine = Record().adding("h", Entry("h1-1", "s1", "h1", "exclusive"))
        commit = Commit(kv, "g.h1-1", b"{}", alongside=True)
        written = await commit.with_write(write(kv, "k.a", mine, rev))
        assert written > rev
        token = await commit.token()
        assert token > rev
        assert (await kv.get("g.h1-1")).revision == token

    in_bucket(nats_server, go)


# Holds back every delivery of the watch on the records (k.>) while the file HOLD
# exists (in order: the ones behind it wait too); PASSED is made once one held back
# has gone through. Each try of a fleet claim that comes back adds a line to TRIES.
HOLD_RECORD_WATCH = """
import os, anyio
from nats.js.client import JetStreamContext
from meshd.fleet.claims import FleetClaims
HOLD, PASSED, TRIES = {hold!r}, {passed!r}, {tries!r}
subscribe = JetStreamContext.subscribe
async def held_back(self, subject, *args, cb=None, **kw):
    if cb is not None and subject.endswith(".k.>"):
        inner = cb
        async def cb(msg):
            held = os.path.exists(HOLD)
            while os.path.exists(HOLD):
                await anyio.sleep(0.02)
            await inner(msg)
            if held:
                open(PASSED, "w").close()
    return await subscribe(self, subject, *args, cb=cb, **kw)
JetStreamContext.subscribe = held_back
acquire = FleetClaims.acquire
async def counted(self, *args, **kw):
    got = await acquire(self, *args, **kw)
    with open(TRIES, "a") as f:
        f.write(type(got).__name__ + "\\n")
    return got
FleetClaims.acquire = counted
"""

NO_LOOK = "[defaults]\nheartbeat_interval = 60\n"
"""A waiter looks again on its own only every 60 s: within its wait here only a
wake-up lets it try again."""


def test_a_local_release_hands_on_to_a_local_waiter_without_the_watch(
    fleet_hosts: HostFactory, tmp_path: Any
) -> None:
    """A release on this host wakes this host's waiter from the release's own write,
    not from the watch's echo of it: with the watch held back (from before the waiter
    came), the waiter is granted once, with a token above the last holder's, and the
    echoes that come afterwards change nothing. Before, the waiter slept until the
    watch delivered the echo (here: at the end of its wait, by its last try)."""
    hold, passed, tries = tmp_path / "hold", tmp_path / "passed", tmp_path / "tries"
    fault = HOLD_RECORD_WATCH.format(hold=str(hold), passed=str(passed), tries=str(tries))
    (h1,) = fleet_hosts(1, extra=NO_LOOK, hold=fault)
    a, b, c = register(h1), register(h1), register(h1)
    first = acquire(h1, a, "box:hand")
    assert first["status"] == "granted"
    tries.unlink()
    hold.touch()
    w = Background(h1, b, "box:hand", wait=60)  # a try at its end would find it free

    def parked() -> bool:  # its first try, in line, its second try: now it waits
        return tries.exists() and tries.read_text().split() == ["FleetHeld", "FleetHeld"]

    wait_for(parked, what="b tried twice and waits in the fleet's line")
    release(h1, a, "box:hand")
    wait_for(lambda: w.reply is not None, 30, what="b answered, the watch still held back")
    got = w.result()
    assert got["status"] == "granted", got
    assert got["token"] > first["token"]
    hold.unlink()
    wait_for(passed.exists, what="the held-back deliveries went through")

    mine = h1.call("claim.list", {"session_id": b})["claims"]
    assert [(x["resource"], x["token"]) for x in mine] == [("box:hand", got["token"])]
    assert waiting_on(h1) == []
    assert h1.call("claim.validate", {"resource": "box:hand", "token": got["token"]})["valid"]
    old = h1.call("claim.validate", {"resource": "box:hand", "token": first["token"]})
    assert not old["valid"]
    third = acquire(h1, c, "box:hand")
    assert third["status"] == "held"
    assert [x["session_id"] for x in third["holders"]] == [b]


@pytest.mark.anyio
async def test_writes_sent_together_go_in_order_and_all_run_to_their_end() -> None:
    """``together`` (a claim's compare-and-set and commit record, a release's writes):
    the first sends before any other starts, the others in their order, and it returns
    once every one is done, whichever finishes last."""
    from meshd.fleet.claim_bucket import together

    log: list[str] = []
    gates = {name: anyio.Event() for name in "abc"}

    async def send(name: str) -> None:
        log.append(f"sent {name}")
        await gates[name].wait()
        log.append(f"done {name}")

    async def open_gates() -> None:
        await anyio.sleep(0.01)
        for name in "cba":  # the first to be sent is the last answered
            gates[name].set()
            await anyio.sleep(0)

    async with anyio.create_task_group() as tg:
        tg.start_soon(open_gates)
        await together(send("a"), send("b"), send("c"))
        assert log[:3] == ["sent a", "sent b", "sent c"]
        assert sorted(log[3:]) == ["done a", "done b", "done c"]
    await together()  # nothing to send: nothing to wait for


@pytest.mark.anyio
@pytest.mark.parametrize("how", ["cancelled", "the first failed"])
async def test_writes_sent_together_and_cut_short_leave_none_running(how: str) -> None:
    """Cut short (its request cancelled, the daemon stopping) or failing, ``together``
    cancels the writes still in flight and raises only once each of them has ended:
    none is left running behind it."""
    from meshd.fleet.claim_bucket import together

    ended: list[str] = []
    started = anyio.Event()

    async def stuck(name: str) -> None:
        try:
            started.set()
            await anyio.sleep_forever()
        finally:
            await anyio.sleep(0)  # ending takes a pass of the loop
            ended.append(name)

    async def first() -> None:
        await started.wait()
        if how != "cancelled":
            raise LookupError("the first failed")
        await anyio.sleep_forever()

    with pytest.raises(LookupError) if how != "cancelled" else contextlib.nullcontext():
        with anyio.move_on_after(0.05 if how == "cancelled" else 30):
            await together(first(), stuck("b"), stuck("c"))
    assert sorted(ended) == ["b", "c"]
