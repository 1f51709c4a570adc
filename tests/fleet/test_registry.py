"""The registry across hosts (SPEC §12) with a real nats-server and three real meshd:
every host lists every host's sessions with their ``host``; ``local`` lists its own;
a host that vanishes is shown stale, then dropped by the per-key TTL; a host cut
off keeps its own mesh and is seen again, with what changed, once it is back."""

from __future__ import annotations

import os
from typing import Any

import pytest
from tests.fleet.conftest import FleetHost, HostFactory, NatsServer
from tests.support import wait_for

FAST = "[defaults]\nheartbeat_interval = 1\n"
"""Entries are rewritten every second and live 3 s: host loss shows within seconds."""


def register(h: FleetHost, task: str) -> str:
    return str(h.call("session.register", {"task": task, "pid": os.getpid()})["session_id"])


def listing(h: FleetHost, **params: Any) -> dict[str, dict[str, Any]]:
    return {s["session_id"]: s for s in h.call("session.list", params)["sessions"]}


def test_every_host_lists_every_hosts_sessions(fleet_hosts: HostFactory) -> None:
    hosts = fleet_hosts(3, extra=FAST)
    sids = {h.name: register(h, f"work on {h.name}") for h in hosts}

    for h in hosts:
        seen = wait_for(
            lambda h=h: (got := listing(h)) and len(got) == 3 and got,
            what=lambda h=h: f"{h.name} sees {listing(h)}",
        )
        assert {s["session_id"]: s["host"] for s in seen.values()} == {
            sid: name for name, sid in sids.items()
        }
        assert seen[sids["h2"]]["task"] == "work on h2"
        assert list(listing(h, local=True)) == [sids[h.name]]

    h1, h2, _ = hosts
    shown = h1.call("session.get", {"session_id": sids["h2"]})
    assert (shown["host"], shown["task"]) == ("h2", "work on h2")
    st = h1.status()
    assert [(x["host"], x["sessions"]) for x in st["hosts"]] == [("h2", 1), ("h3", 1)]

    h2.call("session.end", {"session_id": sids["h2"]})
    wait_for(lambda: sids["h2"] not in listing(h1), what="h2's ended session to leave h1's list")


@pytest.mark.slow
def test_a_vanished_host_is_stale_first_then_dropped(fleet_hosts: HostFactory) -> None:
    # 2 s intervals: stale after 4 s, gone by TTL at 6 s. With 1 s the stale window was
    # about a second, and a loaded machine's slow polls could step over it (seen once).
    h1, _, h3 = fleet_hosts(3, extra="[defaults]\nheartbeat_interval = 2\n")
    sid = register(h3, "cron import")
    wait_for(lambda: sid in listing(h1), 30, what="h3's session on h1")

    h3.daemon.kill()  # kill -9: no goodbye, only the TTL removes its entry

    wait_for(lambda: listing(h1).get(sid, {}).get("stale"), 30, what="h3's session shown stale")
    assert sid not in listing(h1, fresh=True)
    wait_for(lambda: sid not in listing(h1), 30, what="h3's session dropped by TTL")
    assert [x["host"] for x in h1.status()["hosts"]] == ["h2"]
    # the server itself removes h3's key (per-key TTL), not only h1's view of it
    wait_for(lambda: bucket_keys(h1.server) == {"h1", "h2"}, 30, what="h3's key gone by TTL")


@pytest.mark.slow
def test_the_registry_comes_back_after_nats_is_killed(
    fleet_hosts: HostFactory, nats_server: NatsServer
) -> None:
    h1, h2 = fleet_hosts(2, extra=FAST)
    before = register(h2, "before the crash")
    wait_for(lambda: before in listing(h1), what="h2's session on h1")

    nats_server.kill()  # kill -9; its store stays
    wait_for(lambda: not h1.connected(), 15, what="h1 to notice")
    after = register(h2, "while NATS is down")  # h2's own mesh goes on
    nats_server.start()

    seen = wait_for(
        lambda: (got := listing(h1)) and {before, after} <= set(got) and got,
        20,
        what=lambda: f"h1 sees {listing(h1)}",
    )
    assert not seen[after]["stale"]


def bucket_keys(server: NatsServer) -> set[str]:
    """The keys of profile test's sessions bucket, read straight from the server."""
    import asyncio

    import nats
    import nats.js.errors

    async def keys() -> set[str]:
        nc = await nats.connect(server.url, **server.client_options())
        try:
            kv = await nc.jetstream().key_value("mesh_test_sessions")
            try:
                return set(await kv.keys())
            except nats.js.errors.NoKeysError:
                return set()
        finally:
            await nc.close()

    return asyncio.run(keys())


def test_a_clean_stop_leaves_at_once(fleet_hosts: HostFactory) -> None:
    """SIGTERM withdraws the host's entry: gone before its 15 s TTL (default interval)."""
    h1, h2 = fleet_hosts(2)
    sid = register(h2, "leaving")
    wait_for(lambda: sid in listing(h1), what="h2's session on h1")

    h2.daemon.stop()

    wait_for(lambda: sid not in listing(h1), 10, what="h2's entry withdrawn")


@pytest.mark.slow
def test_a_cut_host_keeps_its_mesh_and_comes_back(fleet_hosts: HostFactory) -> None:
    h1, h2 = fleet_hosts(2, extra=FAST)
    first = register(h2, "before the cut")
    wait_for(lambda: first in listing(h1), what="h2's session on h1")

    h2.cut()
    wait_for(lambda: not h2.connected(), 15, what="h2 to notice the cut")
    # alone, h2 serves as ever: registers, claims, lists its own
    second = register(h2, "during the cut")
    claim = h2.call("claim.acquire", {"session_id": second, "resources": ["port:9000"]})
    assert claim["status"] == "granted"
    assert {first, second} <= set(listing(h2))
    wait_for(lambda: first not in listing(h1), what="h2 dropped from h1 by TTL")

    h2.heal()
    h2.wait_connected()
    seen = wait_for(
        lambda: (got := listing(h1)) and {first, second} <= set(got) and got,
        what="h2's sessions back on h1",
    )
    assert seen[second]["host"] == "h2"
