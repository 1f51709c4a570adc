"""The claims bucket deleted under running daemons (docs/FLEET.md, "Fencing tokens").

An operator (or a script) deletes ``mesh_<profile>_claims`` while every host stays
connected. Its records are gone, so the claims it decided are gone: the host that
held one is told it lost it (never a claim the fleet no longer knows), the bucket is
made again, fleet-wide claims are refused on that host with a clear reason while the
new bucket's revisions are below a token it granted, and the other hosts' listings
follow the new, empty bucket. Real nats-server, one meshd per host.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from tests.conftest import rpc
from tests.fleet.conftest import FleetHost, HostFactory, NatsServer
from tests.support import wait_for

FAST = "[defaults]\nheartbeat_interval = 1\n"


def register(h: FleetHost, sid: str) -> None:
    h.call("session.register", {"session_id": sid, "pid": os.getpid(), "task": f"task of {sid}"})


def acquire(h: FleetHost, sid: str, res: str) -> dict[str, Any]:
    return dict(h.call("claim.acquire", {"session_id": sid, "resources": [res]}))


def delete_bucket(server: NatsServer, name: str) -> None:
    import nats

    async def go() -> None:
        nc = await nats.connect(server.url, **server.client_options())
        try:
            await nc.jetstream().delete_key_value(name)
        finally:
            await nc.close()

    asyncio.run(go())


def test_a_bucket_deleted_under_running_hosts_is_made_again_and_said(
    fleet_hosts: HostFactory, nats_server: NatsServer
) -> None:
    """h1:a holds box:kept (and h2 lists it); the bucket is deleted. h1 reports the
    claim lost (``lose``, ``how: fleet``), makes the bucket again and refuses fleet-wide
    claims naming the reason (below the token it granted); h2's listings drop the
    claim with the bucket. Before, the hosts kept their binding of the deleted bucket:
    h1 went on believing it held box:kept, answered "not reconciled yet" for ever, and
    h2 listed the claim of a bucket that no longer existed."""
    h1, h2 = fleet_hosts(2, extra=FAST)
    register(h1, "h1:a")
    register(h2, "h2:b")
    for n in range(3):  # revisions well above a new bucket's first ones
        acquire(h1, "h1:a", f"box:{n}")
    token = acquire(h1, "h1:a", "box:kept")["claims"][0]["token"]
    wait_for(
        lambda: "box:kept" in {c["resource"] for c in h2.call("claim.list")["claims"]},
        15,
        what="h2 to list box:kept",
    )

    delete_bucket(nats_server, "mesh_test_claims")

    def problem() -> str | None:
        return h1.status()["parts"]["claims"]["problem"]

    text = wait_for(problem, 20, what=lambda: f"h1 to see the bucket made again: {h1.tails()}")
    assert f"below token {token}" in text
    assert h1.call("claim.list", {"session_id": "h1:a"})["claims"] == []
    lost = [e for e in h1.call("audit.log")["entries"] if e["action"] == "lose"]
    assert {(e["resource"], e["how"]) for e in lost} >= {("box:kept", "fleet")}
    reply = rpc(h1.daemon.socket, "claim.acquire", {"session_id": "h1:a", "resources": ["box:x"]})
    assert reply["error"]["data"]["code"] == "UNAVAILABLE", reply
    assert "below token" in reply["error"]["message"]
    wait_for(
        lambda: h2.call("claim.list")["claims"] == [],
        20,
        what=lambda: f"h2 to follow the new bucket: {h2.call('claim.list')}",
    )
