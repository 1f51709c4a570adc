"""The listings read the other hosts' fleet claims from memory (docs/FLEET.md, "Listings").

``claim.list``, ``sessions show`` (``session.get``), ``session.list`` and so ``sync``
and ``top`` show every other host's claims on fleet-wide keys as the bucket's commit
records say; a watch keeps those records in memory, so a listing is answered without
asking NATS: still right, and at once, while the server does not answer. Real
nats-server (paused with SIGSTOP: it holds the connections and answers nothing), one
meshd per host.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.fleet.conftest import FleetHost, HostFactory, NatsServer
from tests.support import wait_for


def register(h: FleetHost, sid: str) -> None:
    h.call("session.register", {"session_id": sid, "pid": os.getpid(), "task": f"task of {sid}"})


def listed(h: FleetHost, sid: str | None = None) -> list[tuple[str, str, str, int]]:
    params = {} if sid is None else {"session_id": sid}
    return [
        (c["session_id"], c["resource"], c.get("host") or "", c["token"])
        for c in h.call("claim.list", params)["claims"]
    ]


@contextmanager
def paused(server: NatsServer) -> Iterator[None]:
    """nats-server stopped (SIGSTOP): connections stay open, nothing is answered."""
    assert server.proc is not None
    server.proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        server.proc.send_signal(signal.SIGCONT)


def view(h: FleetHost) -> dict[str, Any]:
    return dict(h.status()["parts"]["claims"]["view"])


def test_listings_answer_from_memory_while_nats_answers_nothing(
    fleet_hosts: HostFactory, nats_server: NatsServer
) -> None:
    """h1:a holds res:gpu; with nats-server paused, h2's ``claim.list`` (all, and of
    h1:a), ``session.get h1:a`` and ``session.list`` still show it held on h1 with its
    token. Before, each listing read the commit records over NATS: it waited five
    seconds for a server that did not answer, then showed no claim of h1 at all."""
    h1, h2 = fleet_hosts(2)
    register(h1, "h1:a")
    register(h2, "h2:b")
    wait_for(
        lambda: "h1:a" in {s["session_id"] for s in h2.call("session.list")["sessions"]},
        15,
        what="h2 to list h1:a",
    )
    got = h1.call("claim.acquire", {"session_id": "h1:a", "resources": ["res:gpu"]})
    token = got["claims"][0]["token"]
    want = [("h1:a", "res:gpu", "h1", token)]
    wait_for(lambda: listed(h2) == want, 15, what=lambda: f"h2's claim.list: {listed(h2)}")

    with paused(nats_server):
        assert listed(h2) == want
        assert listed(h2, "h1:a") == want
        shown = h2.call("session.get", {"session_id": "h1:a"})
        assert [(c["resource"], c["token"]) for c in shown["claims"]] == [("res:gpu", token)]
        [a] = [s for s in h2.call("session.list")["sessions"] if s["session_id"] == "h1:a"]
        assert [c["resource"] for c in a["claims"]] == ["res:gpu"]

    h2.wait_connected()
    h1.call("claim.release", {"session_id": "h1:a", "resources": ["res:gpu"]})
    wait_for(lambda: listed(h2) == [], 15, what=lambda: f"h2 to see the release: {listed(h2)}")
    assert view(h2)["state"] == "current"


def test_a_cut_host_lists_the_last_known_claims_and_catches_up_when_back(
    fleet_hosts: HostFactory,
) -> None:
    """h2 is cut off: its listings show the fleet's claims as they were when its feed
    stopped (``view`` says ``last known``); once back, they catch up with what changed
    meanwhile (h1:a let res:gpu go and took res:tpu). Before, a cut host's
    ``claim.list`` showed no claim of another host."""
    h1, h2 = fleet_hosts(2, extra="[defaults]\nheartbeat_interval = 1\n")
    register(h1, "h1:a")
    register(h2, "h2:b")
    got = h1.call("claim.acquire", {"session_id": "h1:a", "resources": ["res:gpu"]})
    gpu = ("h1:a", "res:gpu", "h1", got["claims"][0]["token"])
    wait_for(lambda: listed(h2) == [gpu], 15, what=lambda: f"h2's claim.list: {listed(h2)}")

    h2.cut()
    wait_for(lambda: not h2.connected(), 15, what="h2 to notice the cut")
    assert listed(h2) == [gpu]
    assert view(h2)["state"] == "last known"
    h1.call("claim.release", {"session_id": "h1:a", "resources": ["res:gpu"]})
    got = h1.call("claim.acquire", {"session_id": "h1:a", "resources": ["res:tpu"]})
    tpu = ("h1:a", "res:tpu", "h1", got["claims"][0]["token"])
    assert listed(h2) == [gpu]  # nothing new reaches a cut host

    h2.heal()
    h2.wait_connected()
    wait_for(lambda: listed(h2) == [tpu], 15, what=lambda: f"h2 to catch up: {listed(h2)}")
    wait_for(lambda: view(h2)["state"] == "current", 15, what=lambda: f"h2's view: {view(h2)}")


def test_a_dead_hosts_claims_leave_the_listings_when_its_lease_runs_out(
    fleet_hosts: HostFactory,
) -> None:
    """h1 is killed (kill -9: nothing withdrawn) while h1:a holds res:gpu: h2's
    listings keep the claim while h1's lease lasts, then drop it (the mirror counts a
    host for the TTL of its last renewal seen), while the link stays up."""
    h1, h2 = fleet_hosts(2, extra="[defaults]\nheartbeat_interval = 1\n")
    register(h1, "h1:a")
    got = h1.call("claim.acquire", {"session_id": "h1:a", "resources": ["res:gpu"]})
    want = [("h1:a", "res:gpu", "h1", got["claims"][0]["token"])]
    wait_for(lambda: listed(h2) == want, 15, what=lambda: f"h2's claim.list: {listed(h2)}")

    h1.daemon.kill()

    wait_for(lambda: listed(h2) == [], 20, what=lambda: f"h2 to drop h1's claim: {listed(h2)}")
    assert h2.connected()
    assert view(h2)["state"] == "current"
    assert view(h2)["commits"] == 1  # the commit record is still there; its host is not
