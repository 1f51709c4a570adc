"""The claims bucket deleted under running daemons (docs/FLEET.md, "Fencing tokens").

An operator (or a script) deletes ``mesh_<profile>_claims`` while every host stays
connected. Its records are gone, so the claims it decided are gone: the host that
held one is told it lost it (never a claim the fleet no longer knows), the bucket is
made again, fleet-wide claims are refused on that host with a clear reason while the
new bucket's revisions are below a token it granted, and the other hosts' listings
follow the new, empty bucket. A bucket deleted and made again at once is followed
too, by hosts that had nothing in it. Real nats-server, one meshd per host.
"""

from __future__ import annotations

import asyncio
import os
import shutil
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


def three_hosts_with_history(fleet_hosts: HostFactory) -> list[FleetHost]:
    """h1, h2, h3 with a session each, h3 having claimed and released box:0..7: the
    bucket's revisions well above a new bucket's first ones, h1 and h2 holding nothing."""
    hosts = fleet_hosts(3, extra=FAST)
    for h, sid in zip(hosts, ("h1:a", "h2:b", "h3:c"), strict=True):
        register(h, sid)
    for n in range(8):
        acquire(hosts[2], "h3:c", f"box:{n}")
        hosts[2].call("claim.release", {"session_id": "h3:c", "resources": [f"box:{n}"]})
    return hosts


def h1_claims_and_h2_lists_it(h1: FleetHost, h2: FleetHost, *, claim_within: float) -> None:
    """h1:a claims box:after in the (new) bucket, as soon as h1 is ready to; h2's
    listing then shows it, held by h1."""

    def h1_claims() -> dict[str, Any] | None:
        reply = rpc(h1.daemon.socket, "claim.acquire", {"session_id": "h1:a",
                                                        "resources": ["box:after"]})  # fmt: skip
        return reply.get("result")

    got = wait_for(
        h1_claims, claim_within, what=lambda: f"h1 to claim in the new bucket: {h1.tails()}"
    )
    assert got["status"] == "granted", got

    def h2_lists() -> bool:
        return [(c["resource"], c["host"]) for c in h2.call("claim.list")["claims"]] == [
            ("box:after", "h1")
        ]

    wait_for(h2_lists, what=lambda: f"h2 to list h1's claim: {h2.status()}\n{h2.tails()}")


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

    text = wait_for(problem, what=lambda: f"h1 to see the bucket made again: {h1.tails()}")
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


def make_bucket_again(server: NatsServer, name: str) -> None:
    """Delete the bucket's stream and make it again at once, as it was configured: what
    ``nats kv del`` and a new bucket do, or a server that lost its store and a host
    that made the bucket again. The hosts' links stay up all along."""
    import nats

    async def go() -> None:
        nc = await nats.connect(server.url, **server.client_options())
        try:
            js = nc.jetstream()
            config = (await js.stream_info(f"KV_{name}")).config
            await js.delete_stream(f"KV_{name}")
            await js.add_stream(config)
        finally:
            await nc.close()

    asyncio.run(go())


def has_key(server: NatsServer, name: str, key: str) -> bool:
    import nats
    import nats.js.errors

    async def go() -> bool:
        nc = await nats.connect(server.url, **server.client_options())
        try:
            await (await nc.jetstream().key_value(name)).get(key)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.BucketNotFoundError):
            return False  # not there yet
        finally:
            await nc.close()
        return True

    return asyncio.run(go())


def test_a_bucket_made_again_is_followed_by_a_host_without_claims(
    fleet_hosts: HostFactory, nats_server: NatsServer
) -> None:
    """h3 takes and gives back claims, so the bucket's revisions climb; the bucket is
    deleted and made again while every link stays up. A claim h1 makes in the new
    bucket shows in h2's listing and check, and h2's view is current. Before, h2 (no
    claim of its own to lose) kept its watches on the old bucket's sequences: they
    went on past the new bucket's first records, and h2 never listed h1's claim while
    ``fleet status`` said its view was current."""
    h1, h2, _ = three_hosts_with_history(fleet_hosts)
    wait_for(lambda: h2.call("claim.list")["claims"] == [], 15, what="h2 to list nothing")

    make_bucket_again(nats_server, "mesh_test_claims")
    # h1's lease in the new bucket first: a claim made before it would be lost at
    # h1's next renewal (its lease had run out there), and rightly so
    wait_for(lambda: has_key(nats_server, "mesh_test_claims", "l.h1"), 15, what="h1's lease")

    h1_claims_and_h2_lists_it(h1, h2, claim_within=20)

    def h2_checks() -> bool:  # answered from h2's own table while it reconciles
        got = h2.call("claim.check", {"resources": ["box:after"]})
        return [(c["session_id"], c["host"]) for c in got["claims"]] == [("h1:a", "h1")]

    wait_for(h2_checks, what=lambda: f"h2 to check h1's claim: {h2.status()}")
    assert h2.status()["parts"]["claims"]["view"]["state"] == "current"


def test_a_server_that_lost_its_store_is_followed_by_a_host_without_claims(
    fleet_hosts: HostFactory, nats_server: NatsServer
) -> None:
    """nats-server is killed and comes back without its JetStream store (a wiped disk):
    the claims bucket is gone, and a host makes it again. A claim h1 makes in the new
    bucket shows in h2's listing and check, h2 holding nothing itself."""
    h1, h2, _ = three_hosts_with_history(fleet_hosts)

    nats_server.kill()
    shutil.rmtree(nats_server.store)
    nats_server.start()
    wait_for(lambda: has_key(nats_server, "mesh_test_claims", "l.h1"), 30, what="h1's lease")

    h1_claims_and_h2_lists_it(h1, h2, claim_within=30)
    assert h2.status()["parts"]["claims"]["view"]["state"] == "current"


def test_a_bucket_made_again_is_watched_for_the_claims_taken_from_a_host(
    fleet_hosts: HostFactory, nats_server: NatsServer
) -> None:
    """The bucket is deleted and made again under live links; h2 then claims box:mine
    in the new bucket and h1 steals it: h2 hears of it (``lose``, ``fleet-stolen``), as
    its watch on the records tells it. Before, h2 (no claim of its own in the old
    bucket) kept that watch on the old bucket's sequences and never heard: its session
    went on believing it held box:mine."""
    h1, h2, _ = three_hosts_with_history(fleet_hosts)

    make_bucket_again(nats_server, "mesh_test_claims")
    for host in ("h1", "h2"):  # a claim before its lease is back would be lost (above)
        key = f"l.{host}"
        wait_for(lambda k=key: has_key(nats_server, "mesh_test_claims", k), 15, what=key)

    def granted(h: FleetHost, method: str, sid: str) -> dict[str, Any] | None:
        params = {"session_id": sid, "resources": ["box:mine"], "reason": "on call"}
        reply = rpc(h.daemon.socket, method, params)
        result = reply.get("result")
        return result if result is not None and result["status"] == "granted" else None

    wait_for(lambda: granted(h2, "claim.acquire", "h2:b"), 20, what=h2.tails)
    wait_for(lambda: granted(h1, "claim.steal", "h1:a"), 20, what=h1.tails)

    def lost() -> list[tuple[str, str]]:
        entries = h2.call("audit.log")["entries"]
        return [(e["resource"], e["how"]) for e in entries if e["action"] == "lose"]

    wait_for(lost, what=lambda: f"h2 to hear of the steal: {h2.tails()}")
    assert lost() == [("box:mine", "fleet-stolen")]
    assert h2.call("claim.list", {"session_id": "h2:b"})["claims"] == []
