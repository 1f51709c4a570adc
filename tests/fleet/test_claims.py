"""Fleet-wide claims (SPEC §12, docs/FLEET.md): real nats-server, one real meshd per host.

Claims on ``shared_kinds`` and under ``shared_paths`` are decided in the fleet's KV
bucket; the KV revision is the fencing token; validate works from any host; a set is
never half held; waiters on another host are woken; a partition refuses or grants
local-only; a NATS kill -9 keeps tokens growing.
"""

from __future__ import annotations

import itertools
import os
import shutil
import threading
import time
from typing import Any

import pytest
from tests.conftest import rpc
from tests.fleet.conftest import FleetHost, HostFactory, NatsServer
from tests.fleet.secure import FLAVOURS
from tests.support import wait_for


def register(h: FleetHost, task: str = "t") -> str:
    return str(h.call("session.register", {"task": task, "pid": os.getpid()})["session_id"])


def acquire(h: FleetHost, sid: str, *resources: str, **kw: Any) -> dict[str, Any]:
    return dict(h.call("claim.acquire", {"session_id": sid, "resources": list(resources), **kw}))


def release(h: FleetHost, sid: str, *resources: str) -> None:
    h.call("claim.release", {"session_id": sid, "resources": list(resources) or None})


def validate(h: FleetHost, resource: str, token: int) -> dict[str, Any]:
    return dict(h.call("claim.validate", {"resource": resource, "token": token}))


@pytest.mark.flavours(*FLAVOURS)
def test_a_fleet_key_is_held_across_hosts(fleet_hosts: HostFactory) -> None:
    h1, h2 = fleet_hosts(2)
    a, b = register(h1), register(h2)

    got = acquire(h1, a, "box:gpu")
    assert got["status"] == "granted"
    held = acquire(h2, b, "box:gpu")
    assert held["status"] == "held"
    assert [(x["session_id"], x["host"]) for x in held["holders"]] == [(a, "h1")]

    release(h1, a, "box:gpu")
    again = acquire(h2, b, "box:gpu")
    assert again["status"] == "granted"
    assert again["token"] > got["token"]


def test_local_kinds_stay_local(fleet_hosts: HostFactory) -> None:
    h1, h2 = fleet_hosts(2)
    a, b = register(h1), register(h2)

    assert acquire(h1, a, "port:8080")["status"] == "granted"
    assert acquire(h2, b, "port:8080")["status"] == "granted"  # another machine's port


def test_validate_works_from_every_host(fleet_hosts: HostFactory) -> None:
    h1, h2, h3 = fleet_hosts(3)
    a = register(h1)
    token = acquire(h1, a, "account:bank")["token"]

    for h in (h1, h2, h3):
        v = validate(h, "account:bank", token)
        assert (v["valid"], v["session_id"], v["host"]) == (True, a, "h1"), (h.name, v)
        assert validate(h, "account:bank", token + 1)["valid"] is False

    release(h1, a)
    for h in (h1, h2, h3):  # at once, or once a release write that timed out is retried
        wait_for(
            lambda h=h: validate(h, "account:bank", token)["valid"] is False,
            what=f"{h.name} to see the release",
        )


def test_a_mixed_set_is_refused(fleet_hosts: HostFactory) -> None:
    (h1,) = fleet_hosts(1)
    a = register(h1)

    reply = rpc(
        h1.daemon.socket,
        "claim.acquire",
        {"session_id": a, "resources": ["box:x", "port:9000"]},
    )
    assert reply["error"]["data"]["code"] == "BAD_KEY", reply
    assert "box:x" in reply["error"]["message"]
    assert h1.call("claim.list")["claims"] == []


def test_shared_paths_cover_their_descendants_across_hosts(
    fleet_hosts: HostFactory, tmp_path: Any
) -> None:
    shared = tmp_path / "shared"
    (shared / "repo" / "src").mkdir(parents=True)
    h1, h2 = fleet_hosts(2, fleet_extra=f'shared_paths = ["{shared}"]')
    a, b = register(h1), register(h2)

    assert acquire(h1, a, f"file:{shared}/repo/src/a.py")["status"] == "granted"
    folder = acquire(h2, b, f"file:{shared}/repo")
    assert folder["status"] == "held"
    assert folder["holders"][0]["host"] == "h1"
    assert acquire(h2, b, f"file:{shared}/repo/src/b.py")["status"] == "granted"
    release(h1, a)
    release(h2, b)
    assert acquire(h2, b, f"file:{shared}/repo")["status"] == "granted"
    assert acquire(h1, a, f"file:{shared}/repo/src/a.py")["status"] == "held"


def test_a_key_into_a_folder_not_named_in_utf8_is_refused(
    fleet_hosts: HostFactory, tmp_path: Any
) -> None:
    """Under ``shared_paths``, through a link into a folder whose name is not UTF-8:
    refused BAD_KEY before the bucket (it went there, and came back UNAVAILABLE)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.mkdir(os.path.join(os.fsencode(shared), b"caf\xe9"))
    os.symlink(os.path.join(os.fsencode(shared), b"caf\xe9"), shared / "link")
    (h1,) = fleet_hosts(1, fleet_extra=f'shared_paths = ["{shared}"]')
    key = f"file:{shared}/link/a"

    reply = rpc(h1.daemon.socket, "claim.acquire", {"session_id": register(h1), "resources": [key]})

    assert reply["error"]["data"]["code"] == "BAD_KEY", reply
    assert '"caf\\xe9" is not UTF-8' in reply["error"]["message"]
    assert h1.call("claim.list")["claims"] == []


def test_shared_mode_across_hosts(fleet_hosts: HostFactory) -> None:
    h1, h2, h3 = fleet_hosts(3)
    a, b, c = register(h1), register(h2), register(h3)

    assert acquire(h1, a, "res:db", mode="shared")["status"] == "granted"
    assert acquire(h2, b, "res:db", mode="shared")["status"] == "granted"
    assert acquire(h3, c, "res:db")["status"] == "held"
    release(h1, a)
    release(h2, b)
    assert acquire(h3, c, "res:db")["status"] == "granted"


def test_a_mode_change_leaves_no_old_grant_in_the_fleet(fleet_hosts: HostFactory) -> None:
    """A fleet key held shared, then taken exclusive by the same session (and back):
    the old grant leaves the fleet with it, its token no longer validates anywhere, and
    once the session releases, another host gets the key."""
    h1, h2 = fleet_hosts(2)
    a, b = register(h1), register(h2)
    shared = acquire(h1, a, "box:m", mode="shared")
    excl = acquire(h1, a, "box:m", mode="exclusive")
    assert (shared["status"], excl["status"]) == ("granted", "granted")

    wait_for(lambda: not validate(h2, "box:m", shared["token"])["valid"])
    assert validate(h2, "box:m", excl["token"])["valid"]
    back = acquire(h1, a, "box:m", mode="shared")
    wait_for(lambda: not validate(h2, "box:m", excl["token"])["valid"])
    release(h1, a, "box:m")

    assert acquire(h2, b, "box:m", wait=30)["status"] == "granted"
    assert not validate(h2, "box:m", back["token"])["valid"]


def test_cross_host_race_history(fleet_hosts: HostFactory) -> None:
    """3 hosts x 8 clients race for one fleet key: no two exclusive holders ever
    overlap, and tokens strictly grow in the order of the grants."""
    hosts = fleet_hosts(3)
    history: list[tuple[str, str, int]] = []  # (event, who, token) in real-time order
    lock = threading.Lock()
    holder: list[str] = []
    errors: list[str] = []

    def client(h: FleetHost, n: int) -> None:
        try:
            rounds(h, n)
        except Exception as exc:  # said in the assert, not lost in a thread
            errors.append(f"c{n} on {h.name}: {exc!r}")

    def rounds(h: FleetHost, n: int) -> None:
        sid = register(h, f"c{n}")
        for _ in range(4):
            # A waiter may queue behind all 23 others: on a loaded machine that is
            # seconds, so the wait is long (a correctness test, not a timing one).
            got = acquire(h, sid, "gateway:main", wait=150)
            if got["status"] != "granted":
                errors.append(f"{sid}: {got}")
                continue
            with lock:
                if holder:
                    errors.append(f"{sid} granted while {holder} holds")
                holder.append(sid)
                history.append(("grant", sid, got["token"]))
            with lock:
                holder.remove(sid)
                history.append(("release", sid, got["token"]))
            release(h, sid, "gateway:main")

    threads = [threading.Thread(target=client, args=(h, i)) for h in hosts for i in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 200
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not [t for t in threads if t.is_alive()], f"clients still running; {errors}"
    assert not errors, errors
    grants = [(who, tok) for ev, who, tok in history if ev == "grant"]
    assert len(grants) == 3 * 8 * 4
    backwards = [(a, b) for a, b in itertools.pairwise(grants) if b[1] <= a[1]]
    assert not backwards, backwards
    for h in hosts:  # nobody lost a claim on the way (a loss would hide a double grant)
        actions = {e["action"] for e in h.call("audit.log", {"limit": 1000})["entries"]}
        assert actions == {"grant", "release"}, (h.name, actions)


def test_partition_fail_refuses_with_unavailable(fleet_hosts: HostFactory) -> None:
    h1, _h2 = fleet_hosts(2)
    a = register(h1)

    h1.cut()
    wait_for(lambda: not h1.connected(), 15, what="h1 to notice the cut")
    reply = rpc(h1.daemon.socket, "claim.acquire", {"session_id": a, "resources": ["cron:x"]})
    assert reply["error"]["data"]["code"] == "UNAVAILABLE", reply
    assert acquire(h1, a, "port:1234")["status"] == "granted"  # local keys as ever
    h1.heal()
    h1.wait_connected()
    wait_for(
        lambda: acquire(h1, a, "cron:x")["status"] == "granted",
        15,
        what="the fleet claim once healed",
    )


def test_tokens_grow_across_a_nats_kill(fleet_hosts: HostFactory, nats_server: NatsServer) -> None:
    h1, h2 = fleet_hosts(2)
    a, b = register(h1), register(h2)
    first = acquire(h1, a, "box:1")["token"]
    release(h1, a)

    nats_server.kill()
    wait_for(lambda: not h1.connected() and not h2.connected(), 15, what="both to notice")
    nats_server.start()
    h1.wait_connected()
    h2.wait_connected()

    def granted() -> dict[str, Any] | None:
        got = rpc(h2.daemon.socket, "claim.acquire", {"session_id": b, "resources": ["box:1"]})
        return got.get("result") if got.get("result", {}).get("status") == "granted" else None

    second = wait_for(granted, what="a grant after the restart")
    assert second["token"] > first


def waiting_on(h: FleetHost) -> list[str]:
    return [w["session_id"] for w in h.call("claim.list")["waiting"]]


class Background:
    """One ``claim.acquire`` in a thread (a waiter), its reply kept."""

    def __init__(self, h: FleetHost, sid: str, *resources: str, **kw: Any) -> None:
        self.reply: dict[str, Any] | None = None
        self.thread = threading.Thread(target=self._run, args=(h, sid, resources, kw))
        self.thread.start()

    def _run(self, h: FleetHost, sid: str, resources: tuple[str, ...], kw: Any) -> None:
        self.reply = acquire(h, sid, *resources, **kw)

    def result(self) -> dict[str, Any]:
        self.thread.join(60)
        assert self.reply is not None
        return self.reply


def test_waiters_on_other_hosts_are_woken_in_ticket_order(fleet_hosts: HostFactory) -> None:
    h1, h2, h3 = fleet_hosts(3)
    a, b, c = register(h1), register(h2), register(h3)
    first = acquire(h1, a, "box:q")["token"]

    wb = Background(h2, b, "box:q", wait=30)
    wait_for(lambda: waiting_on(h2) == [b], what="h2's waiter in line")
    wc = Background(h3, c, "box:q", wait=30)
    wait_for(lambda: waiting_on(h3) == [c], what="h3's waiter in line")
    other = register(h1)
    assert acquire(h1, other, "box:q")["status"] == "held"  # no barging past the line

    release(h1, a)
    got_b = wb.result()
    assert got_b["status"] == "granted"
    assert got_b["token"] > first
    assert wc.thread.is_alive()  # c came later: still in line behind b
    release(h2, b)
    got_c = wc.result()
    assert got_c["status"] == "granted"
    assert got_c["token"] > got_b["token"]
    assert waiting_on(h2) == waiting_on(h3) == []


def test_a_wait_that_runs_out_leaves_the_line(fleet_hosts: HostFactory) -> None:
    h1, h2 = fleet_hosts(2)
    a, b, c = register(h1), register(h2), register(h2)
    acquire(h1, a, "box:w")

    held = acquire(h2, b, "box:w", wait=0.5)
    assert held["status"] == "held"
    assert held["holders"][0]["host"] == "h1"
    assert waiting_on(h2) == []
    release(h1, a)
    assert acquire(h2, c, "box:w")["status"] == "granted"  # b's place in line is gone


def test_an_atomic_set_is_never_half_held(fleet_hosts: HostFactory) -> None:
    h1, h2, h3 = fleet_hosts(3)
    a, b, c = register(h1), register(h2), register(h3)
    acquire(h1, a, "res:b")

    held = acquire(h2, b, "res:a", "res:b", "res:c")
    assert held["status"] == "held"
    assert [(x["resource"], x["host"]) for x in held["holders"]] == [("res:b", "h1")]
    # what the refused set wrote before it met res:b was rolled back
    assert acquire(h3, c, "res:a")["status"] == "granted"
    assert acquire(h3, c, "res:c")["status"] == "granted"
    release(h3, c)
    release(h1, a)

    got = acquire(h2, b, "res:a", "res:b", "res:c")
    assert got["status"] == "granted"
    assert {g["token"] for g in got["claims"]} == {got["token"]}  # one token for the set
    for res in ("res:a", "res:b", "res:c"):
        assert validate(h3, res, got["token"])["valid"]
    release(h2, b)
    for res in ("res:a", "res:b", "res:c"):  # the token died for the whole set
        assert not validate(h1, res, got["token"])["valid"]


def test_overlapping_sets_race_without_overlap(fleet_hosts: HostFactory) -> None:
    """Hosts race sets that overlap in different orders; every grant is the whole
    set, and no two grants of overlapping sets are ever held at once."""
    hosts = fleet_hosts(3)
    sets = [("res:x", "res:y"), ("res:y", "res:z"), ("res:z", "res:x")]
    lock = threading.Lock()
    holding: dict[str, str] = {}
    errors: list[str] = []

    def client(h: FleetHost, n: int) -> None:
        sid = register(h, f"c{n}")
        mine = sets[n % 3]
        for _ in range(4):
            got = acquire(h, sid, *mine, wait=30)
            if got["status"] != "granted":
                errors.append(f"{sid}: {got}")
                continue
            with lock:
                for res in mine:
                    if res in holding:
                        errors.append(f"{sid} got {res} held by {holding[res]}")
                    holding[res] = sid
            with lock:
                for res in mine:
                    del holding[res]
            release(h, sid)

    threads = [threading.Thread(target=client, args=(h, i)) for h in hosts for i in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 200
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not [t for t in threads if t.is_alive()], f"clients still running; {errors}"
    assert not errors, errors


def test_a_steal_across_hosts_tells_the_holder(fleet_hosts: HostFactory) -> None:
    h1, h2 = fleet_hosts(2)
    a, b = register(h1), register(h2)
    old = acquire(h1, a, "account:ops")["token"]

    got = h2.call(
        "claim.steal", {"session_id": b, "resources": ["account:ops"], "reason": "on call"}
    )
    assert got["status"] == "granted"
    assert got["token"] > old
    assert not validate(h1, "account:ops", old)["valid"]

    def mine() -> list[str]:  # h1's own claims (claim.list lists h2's too, with its host)
        return [c["resource"] for c in h1.call("claim.list")["claims"] if c["host"] in (None, "h1")]

    wait_for(lambda: mine() == [], what="h1 to hear of the steal")
    listed = [(c["session_id"], c["resource"], c["host"]) for c in h1.call("claim.list")["claims"]]
    assert listed == [(b, "account:ops", "h2")]

    def lost() -> list[tuple[str, str]]:
        entries = h1.call("audit.log")["entries"]
        return [(e["resource"], e["how"]) for e in entries if e["action"] == "lose"]

    # The loss is stored in the background once memory has it: wait for the row.
    wait_for(lost, timeout=30, what="h1's audit log to have the loss")
    assert lost() == [("account:ops", "fleet-stolen")]


FAST = "[defaults]\nheartbeat_interval = 1\n"  # lease 3 s: given up here after 2 s


def test_a_dead_hosts_claims_are_freed_by_its_lease(fleet_hosts: HostFactory) -> None:
    h1, h2 = fleet_hosts(2, extra=FAST)
    a, b = register(h1), register(h2)
    old = acquire(h1, a, "cron:nightly")["token"]

    h1.daemon.kill()
    got = acquire(h2, b, "cron:nightly", wait=20)
    assert got["status"] == "granted"
    assert got["token"] > old
    assert not validate(h2, "cron:nightly", old)["valid"]


def test_a_cut_off_host_gives_its_claims_up_before_another_gets_them(
    fleet_hosts: HostFactory,
) -> None:
    h1, h2 = fleet_hosts(2, extra=FAST)
    a, b = register(h1), register(h2)
    old = acquire(h1, a, "box:cut")["token"]

    h1.cut()
    got = acquire(h2, b, "box:cut", wait=20)
    assert got["status"] == "granted"
    assert got["token"] > old
    # h1 had given it up (lease not renewed for 2 of its 3 s): never held twice
    assert h1.call("claim.list")["claims"] == []
    lost = [e for e in h1.call("audit.log")["entries"] if e["action"] == "lose"]
    assert [(e["resource"], e["how"]) for e in lost] == [("box:cut", "fleet")]
    h1.heal()
    h1.wait_connected()
    assert acquire(h1, a, "box:cut")["status"] == "held"


def test_partition_local_grants_local_only_and_heals(fleet_hosts: HostFactory) -> None:
    """on_partition = "local": cut off, h1 grants fleet keys here alone, marked
    local-only. On heal, the one nobody else took becomes fleet-wide (a new token);
    the one h2 granted meanwhile is lost on h1: never held twice silently."""
    h1, h2 = fleet_hosts(2, extra=FAST, fleet_extra='on_partition = "local"')
    a, b = register(h1), register(h2)

    h1.cut()
    wait_for(lambda: not h1.connected(), 15, what="h1 to notice the cut")
    free = acquire(h1, a, "res:free")
    taken = acquire(h1, a, "res:taken")
    assert free["status"] == taken["status"] == "granted"
    listed = {c["resource"]: c["local_only"] for c in h1.call("claim.list")["claims"]}
    assert listed == {"res:free": True, "res:taken": True}
    assert h1.status()["local_only"]
    assert acquire(h2, b, "res:taken")["status"] == "granted"  # h2 cannot see h1's

    h1.heal()
    h1.wait_connected()

    def settled() -> dict[str, Any] | None:
        claims = [
            c for c in h1.call("claim.list")["claims"] if c["host"] in (None, "h1")
        ]  # h1's own
        return None if any(c["local_only"] for c in claims) else {c["resource"]: c for c in claims}

    after = wait_for(settled, what="h1 to reconcile")
    assert list(after) == ["res:free"]
    new_token = after["res:free"]["token"]
    assert validate(h2, "res:free", new_token)["valid"]  # fleet-wide now
    assert acquire(h2, b, "res:free")["status"] == "held"
    lost = [e for e in h1.call("audit.log")["entries"] if e["action"] == "lose"]
    assert [(e["resource"], e["how"]) for e in lost] == [("res:taken", "fleet-conflict")]
    assert not h1.status()["local_only"]
    elsewhere = [(c["resource"], c["host"]) for c in h1.call("claim.list")["claims"]]
    assert ("res:taken", "h2") in elsewhere  # h2's, as the fleet holds it (SPEC §12)


def test_a_restarted_meshd_keeps_its_fleet_claims(fleet_hosts: HostFactory) -> None:
    h1, h2 = fleet_hosts(2)
    a, b = register(h1), register(h2)
    token = acquire(h1, a, "gateway:vps")["token"]

    h1.daemon.stop()
    h1.daemon.start()
    h1.wait_connected()
    wait_for(lambda: h1.status()["parts"]["claims"]["ready"], what="h1 to reconcile")
    assert [c["token"] for c in h1.call("claim.list")["claims"]] == [token]
    assert validate(h2, "gateway:vps", token)["valid"]
    assert acquire(h2, b, "gateway:vps")["status"] == "held"
    release(h1, a)
    assert acquire(h2, b, "gateway:vps")["status"] == "granted"


def test_a_local_only_claim_outlives_a_restart_and_is_healed(fleet_hosts: HostFactory) -> None:
    """on_partition = "local": h1, cut off, grants res:x here alone, then its meshd is
    stopped and killed (-9) before the link returns. The claim stays local-only across
    both starts and, once the link is back, is offered to the fleet like any local-only
    set: kept under a fleet token, and later fleet-wide claims on h1 are granted. Before,
    the restart reconcile took it for a fleet claim the bucket lost ("cut off from the
    fleet longer than its lease") and counted its local token (past 4096: the second
    start's block) as a fleet one: every later fleet-wide claim on h1 was refused,
    "bucket ... below token 4097 already granted"."""
    h1, h2 = fleet_hosts(2, extra=FAST, fleet_extra='on_partition = "local"')
    a, b = register(h1), register(h2)
    assert acquire(h1, a, "port:1")["status"] == "granted"  # a local token: block 1 used

    h1.cut()
    wait_for(lambda: not h1.connected(), 15, what="h1 to notice the cut")
    h1.daemon.stop()
    h1.daemon.start()
    x = acquire(h1, a, "res:x")
    assert (x["status"], x["local_only"]) == ("granted", True)
    assert x["token"] > 4096
    h1.daemon.kill()
    h1.daemon.start()
    listed = {c["resource"]: c["local_only"] for c in h1.call("claim.list")["claims"]}
    assert listed == {"port:1": False, "res:x": True}

    h1.heal()
    h1.wait_connected()

    def settled() -> dict[str, Any] | None:
        st = h1.status()
        if not st["parts"]["claims"]["ready"] or st["local_only"]:
            return None
        return {c["resource"]: c for c in h1.call("claim.list")["claims"] if c["host"] != "h2"}

    after = wait_for(settled, 30, what=lambda: f"h1 to heal: {h1.status()}\n{h1.tails()}")
    assert sorted(after) == ["port:1", "res:x"]
    token = after["res:x"]["token"]
    assert token != x["token"]
    assert not after["res:x"]["local_only"]
    assert validate(h2, "res:x", token)["valid"]  # the fleet's now
    assert acquire(h2, b, "res:x")["status"] == "held"
    assert [e for e in h1.call("audit.log")["entries"] if e["action"] == "lose"] == []
    assert acquire(h1, a, "res:y")["status"] == "granted"  # not refused "below token"


def test_a_wiped_bucket_never_hands_out_a_token_below_one_granted(
    fleet_hosts: HostFactory, nats_server: NatsServer
) -> None:
    """The server's store is lost (sequences start again at 1): the host that holds a
    fleet claim learns it lost it, and refuses fleet-wide claims while the bucket's
    revisions are below the tokens it granted."""
    (h1,) = fleet_hosts(1)
    a = register(h1)
    for n in range(5):  # push the revisions up a little
        acquire(h1, a, f"box:{n}")
    token = acquire(h1, a, "box:kept")["token"]

    nats_server.kill()
    shutil.rmtree(nats_server.store)
    nats_server.start()
    h1.wait_connected()

    def problem() -> str | None:
        return h1.status()["parts"]["claims"]["problem"]

    text = wait_for(problem, what="h1 to see the wiped bucket")
    assert f"below token {token}" in text
    assert h1.call("claim.list")["claims"] == []  # they are not in the bucket any more
    reply = rpc(h1.daemon.socket, "claim.acquire", {"session_id": a, "resources": ["box:x"]})
    assert reply["error"]["data"]["code"] == "UNAVAILABLE", reply
    assert "below token" in reply["error"]["message"]


def purge_lease(server: NatsServer, host: str) -> None:
    """Purge ``host``'s lease key from the claims bucket, its link staying up."""
    import asyncio

    import nats

    async def go() -> None:
        nc = await nats.connect(server.url, **server.client_options())
        try:
            kv = await nc.jetstream().key_value("mesh_test_claims")
            await kv.purge(f"l.{host}")
        finally:
            await nc.close()

    asyncio.run(go())


def lease_of(server: NatsServer, host: str) -> int:
    """The revision of ``host``'s lease in the claims bucket (0: none there)."""
    import asyncio

    import nats
    import nats.js.errors

    async def go() -> int:
        nc = await nats.connect(server.url, **server.client_options())
        try:
            kv = await nc.jetstream().key_value("mesh_test_claims")
            return int((await kv.get(f"l.{host}")).revision or 0)
        except nats.js.errors.KeyNotFoundError:
            return 0
        finally:
            await nc.close()

    return asyncio.run(go())


def test_a_lease_lost_while_connected_frees_the_claims_for_others(
    fleet_hosts: HostFactory, nats_server: NatsServer
) -> None:
    """h1's lease vanishes from the bucket while its link stays up: h1 gives its fleet
    claims up at the next renewal, and once its lease is back its old entries must
    not keep the others out: h2 is granted at once, without waiting.

    The test waits for h1's lease to be back before h2 asks, so that h2 meets the
    case it is about, and asks with no wait: an answer other than granted says who
    holds the key (h2's ``wait=15`` on a 10 s socket used to end in a socket timeout
    on a loaded machine, with nothing to tell why)."""
    h1, h2 = fleet_hosts(2, extra=FAST)
    a, b = register(h1), register(h2)
    acquire(h1, a, "box:lease")
    before = lease_of(nats_server, "h1")

    purge_lease(nats_server, "h1")
    wait_for(lambda: h1.call("claim.list")["claims"] == [], 15, what="h1 to give it up")
    wait_for(lambda: lease_of(nats_server, "h1") > before, 15, what="h1's lease back")
    got = acquire(h2, b, "box:lease")
    assert got["status"] == "granted", f"{got}\n{h1.tails()}\n{h2.tails()}"


HOLD_SWEEP = """
import os, anyio
from meshd.fleet.claim_upkeep import ClaimUpkeep
HOLD, HELD = {hold!r}, {held!r}
sweep = ClaimUpkeep._sweep_own
async def _sweep_own(self, *args, **kw):
    if os.path.exists(HOLD):
        open(HELD, "w").close()
        while os.path.exists(HOLD):
            await anyio.sleep(0.02)
    return await sweep(self, *args, **kw)
ClaimUpkeep._sweep_own = _sweep_own
"""


def test_a_host_that_lost_its_lease_keeps_nobody_out_while_it_sweeps(
    fleet_hosts: HostFactory, nats_server: NatsServer, tmp_path: Any
) -> None:
    """h1's lease vanishes while h1:a holds box:lease, and h1's sweep of its lost
    entries is slow (held here, as on a loaded server). h2 is granted box:lease
    meanwhile: h1 renews its lease only once its lost entries are gone, and decides
    no fleet claim before. Before, h1 renewed first and swept after, in its renewal
    loop: its lost claim's entry, alive again, kept h2 out ("held", by h1:a) for as
    long as the sweep took, and the renewals waited for the sweep."""
    hold, held = tmp_path / "hold", tmp_path / "held"
    (h1,) = fleet_hosts(1, extra=FAST, hold=HOLD_SWEEP.format(hold=str(hold), held=str(held)))
    (h2,) = fleet_hosts(1, extra=FAST)
    a, b = register(h1), register(h2)
    acquire(h1, a, "box:lease")
    hold.touch()

    purge_lease(nats_server, "h1")
    wait_for(held.exists, what=lambda: f"h1 to sweep: {h1.tails()}")
    try:
        got = acquire(h2, b, "box:lease")
        refused = rpc(h1.daemon.socket, "claim.acquire", {"session_id": a,
                                                          "resources": ["box:other"]})  # fmt: skip
    finally:
        hold.unlink()
    assert got["status"] == "granted", f"{got}\n{h1.tails()}"
    assert refused["error"]["data"]["code"] == "UNAVAILABLE", refused  # h1 decides nothing
    assert h1.call("claim.list", {"session_id": a})["claims"] == []

    def h1_claims() -> dict[str, Any] | None:  # once its lease is back
        reply = rpc(h1.daemon.socket, "claim.acquire", {"session_id": a,
                                                        "resources": ["box:other"]})  # fmt: skip
        return reply.get("result")

    assert wait_for(h1_claims, what=h1.tails)["status"] == "granted"
    assert acquire(h1, a, "box:lease")["status"] == "held"


def test_a_wait_outlasts_a_cut_and_is_granted_when_the_fleet_is_back(
    fleet_hosts: HostFactory,
) -> None:
    """on_partition = "fail" with time left to wait: the request waits for the fleet
    to come back (a reconnect, a server restart) instead of failing at once."""
    h1, _h2 = fleet_hosts(2)
    a = register(h1)

    h1.cut()
    wait_for(lambda: not h1.connected(), 15, what="h1 to notice the cut")
    waiting = Background(h1, a, "cron:blip", wait=60)
    wait_for(
        lambda: h1.call("mesh.info")["counts"]["connections"] >= 2, what="the request to arrive"
    )
    h1.heal()
    got = waiting.result()
    assert got["status"] == "granted"
    assert validate(h1, "cron:blip", got["token"])["valid"]


def test_a_wait_that_runs_out_while_cut_off_is_unavailable(fleet_hosts: HostFactory) -> None:
    h1, _h2 = fleet_hosts(2)
    a = register(h1)

    h1.cut()
    wait_for(lambda: not h1.connected(), 15, what="h1 to notice the cut")
    reply = rpc(
        h1.daemon.socket,
        "claim.acquire",
        {"session_id": a, "resources": ["cron:gone"], "wait": 0.5},
    )
    assert reply["error"]["data"]["code"] == "UNAVAILABLE", reply


def test_a_fleet_wait_queued_before_a_pause_is_answered_held_not_granted(
    fleet_hosts: HostFactory,
) -> None:
    """docs/CONFORMANCE.md §5b: a pausing session's queued waits are withdrawn at the
    pause and answered ``held``, never granted while it is paused -- its fleet-wide
    waits too (they wait in the fleet's line, not in this host's table). Left in line,
    the fleet-wide wait was granted during the pause."""
    (h1,) = fleet_hosts(1)
    other, low = register(h1), register(h1)
    acquire(h1, other, "box:gpu")
    acquire(h1, low, "res:x")
    w = Background(h1, low, "box:gpu", wait=8)  # (within the test client's timeout)
    wait_for(lambda: waiting_on(h1) == [low], what="low in the fleet's line")

    h1.call("session.pause", {"session_id": low, "note": "stopping here"})
    release(h1, other)  # left in line, low got box:gpu here
    got = w.result()
    again = acquire(h1, register(h1), "box:gpu")
    held = [c["resource"] for c in h1.call("claim.list", {"session_id": low})["claims"]]

    assert got["status"] == "held"
    assert waiting_on(h1) == []
    assert again["status"] == "granted"  # nobody kept it: low left the line
    assert held == []  # res:x went into the reserved set; box:gpu never came


# Holds every fleet try that comes back while the file HOLD exists, once it has decided
# (granted or not, in the bucket): the window in which a session may pause.
HOLD_FLEET_TRY = """
import os, anyio
from meshd.fleet.claims import FleetClaims
HOLD, TRYING = {hold!r}, {trying!r}
decide = FleetClaims.acquire
async def acquire(self, *args, **kw):
    got = await decide(self, *args, **kw)
    if os.path.exists(HOLD):
        open(TRYING, "w").close()
        while os.path.exists(HOLD):
            await anyio.sleep(0.02)
    return got
FleetClaims.acquire = acquire
"""


def test_a_fleet_grant_that_lands_after_the_pause_is_given_back(
    fleet_hosts: HostFactory, tmp_path: Any
) -> None:
    """docs/CONFORMANCE.md §5b: a pausing session's fleet-wide request whose try is in
    flight at the pause (its first, before it has a place in line to leave) can still
    come back granted. That grant is given back in the fleet and the request answered
    ``held``, ``withdrawn: "paused"``; before, the paused session kept the key. The try
    is held, once decided, until the test has paused the session."""
    hold, trying = tmp_path / "hold", tmp_path / "trying"
    (h1,) = fleet_hosts(1, hold=HOLD_FLEET_TRY.format(hold=str(hold), trying=str(trying)))
    low = register(h1)
    acquire(h1, low, "res:x")
    hold.touch()
    w = Background(h1, low, "box:gpu", wait=8)  # box:gpu is free: granted in the fleet
    wait_for(trying.exists, what="low's fleet try decided and held")
    h1.call("session.pause", {"session_id": low, "note": "stopping here"})
    hold.unlink()
    got = w.result()
    held = [c["resource"] for c in h1.call("claim.list", {"session_id": low})["claims"]]
    again = acquire(h1, register(h1), "box:gpu")

    assert (got["status"], got["withdrawn"]) == ("held", "paused")
    assert held == []  # res:x went into the reserved set; box:gpu was given back
    assert again["status"] == "granted"  # in the fleet too
