"""Targets that need methods the daemon does not serve yet: claims, asks, broadcasts.

Every target here first looks its methods up in ``mesh.schema``; when one is
missing the row says "not served yet" and is skipped, so the rows light up by
themselves once ``claim.*``, ``query.*`` and ``message.*`` land. The method and
parameter names follow SPEC §5/§6 and are kept in the constants below: if the
daemon's names differ, change them here and nowhere else.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from bench import load
from bench.common import (
    CLIENT_CPUS,
    LAT_CPUS,
    SERVER_CPUS,
    LineClient,
    all_cpus,
    median,
    pct,
    pin,
    pinned,
    rpc,
    time_roundtrips,
)
from bench.report import spread

if TYPE_CHECKING:
    from bench.targets import Ctx

ACQUIRE = "claim.acquire"
RELEASE = "claim.release"
CHECK = "claim.check"
ASK = "query.ask"
ANSWER = "query.answer"
RESPOND = "query.respond"
BROADCAST = "broadcast.send"
SUBSCRIBE = "events.subscribe"


def acquire(sid: str, resources: list[str], wait: float = 0) -> bytes:
    params: dict[str, Any] = {"session_id": sid, "resources": resources}
    if wait:
        params["wait"] = wait
    return rpc(ACQUIRE, params)


def release(sid: str, resources: list[str]) -> bytes:
    return rpc(RELEASE, {"session_id": sid, "resources": resources})


def check(sid: str, resources: list[str]) -> bytes:
    return rpc(CHECK, {"session_id": sid, "resources": resources})


def deep(i: int, j: int) -> str:
    """A claim deep in a path tree: 100 projects x 100 files, 8 levels down."""
    return f"file:/bench/tree/p{i}/src/pkg/mod/sub/leaf{j}/file{j}.py"


def run(ctx: Ctx) -> None:
    from bench.targets import pipeline, register_many

    g = "claims"
    missing = {m for m in (ACQUIRE, RELEASE, CHECK) if m not in ctx.served}
    skip = f"not served yet ({', '.join(sorted(missing))})" if missing else ""
    names = [
        "claim.check of a free path beside 10,000 live claims",
        "claim.check of a free path: 10,000 live claims vs 100",
        "claim or release round trip p50 (each durable)",
        "claim or release round trip p50, 100,000 finished claims in history",
        "100 clients (95 heartbeating, 5 claiming + releasing): requests/s",
        "100 clients (95 heartbeating, 5 claiming + releasing): p99",
        "queued waiter granted, from sending the release",
    ]
    if skip:
        for name in names:
            ctx.add(g, name=name, value=None, unit="s", skip=skip)
    else:
        _claims(ctx, pipeline, register_many)
    ask_missing = [m for m in (ASK, ANSWER, RESPOND, SUBSCRIBE) if m not in ctx.served]
    if ask_missing:
        ctx.add(g, name="query.ask answered by a live responder p50", value=None, unit="s",
                skip=f"not served yet ({', '.join(ask_missing)})")  # fmt: skip
    else:
        _ask(ctx)
    bc_missing = [m for m in (BROADCAST, SUBSCRIBE) if m not in ctx.served]
    if bc_missing:
        ctx.add(g, name="broadcast to 1,000 subscribed sessions", value=None, unit="s",
                skip=f"not served yet ({', '.join(bc_missing)})")  # fmt: skip
    else:
        _broadcast(ctx)


def _floors(ctx: Ctx) -> tuple[float, float, float]:
    """E p50/p99 and W1 from the run, or measured here when this section runs alone."""
    from bench import floors

    if "E.p50" not in ctx.cache:
        e = LineClient(ctx.echo_path)
        with pinned(LAT_CPUS, ctx.echo.pid):
            t = time_roundtrips(e, rpc("mesh.ping"), ctx.n.lat_n)
        e.close()
        ctx.cache["E.p50"], ctx.cache["E.p99"] = pct(t, 0.5), pct(t, 0.99)
    if "W1" not in ctx.cache:
        with pinned(LAT_CPUS):
            ctx.cache["W1"] = floors.w1(ctx.place.root / "w1c.sqlite3", 200 if ctx.quick else 2000)
    return ctx.cache["E.p50"], ctx.cache["E.p99"], ctx.cache["W1"]


def _ok(replies: list[dict[str, Any]]) -> None:
    """A setup step must not fail silently: the figures would measure errors."""
    bad = [r for r in replies if "error" in r]
    if bad:
        raise RuntimeError(f"{len(bad)} claim requests failed, e.g. {bad[0]['error']}")


def _claims(ctx: Ctx, pipeline: Any, register_many: Any) -> None:
    g = "claims"
    e50, e99, w1 = _floors(ctx)
    holders = [f"holder{i}" for i in range(100)]
    register_many(ctx.sock, holders)
    c = LineClient(ctx.sock, timeout=60)
    per = 10 if ctx.quick else 100
    probe = check(ctx.me, [deep(50, 50).replace("file50.py", "other.py")])
    n = ctx.n.lat_n
    # 100 claims: one per holder
    _ok(pipeline(c, [acquire(h, [deep(i, 0)]) for i, h in enumerate(holders)]))
    with pinned(LAT_CPUS, ctx.meshd.pid):
        c100 = pct(time_roundtrips(c, probe, n), 0.5)
    _ok(
        pipeline(
            c, [acquire(h, [deep(i, j)]) for i, h in enumerate(holders) for j in range(1, per)]
        )
    )
    with pinned(LAT_CPUS, ctx.meshd.pid):
        c10k = pct(time_roundtrips(c, probe, n), 0.5)
        pair = []
        for k in range(n // 4):
            res = [f"file:/bench/solo/f{k}"]
            pair += time_roundtrips(c, acquire(ctx.me, res), 1)
            pair += time_roundtrips(c, release(ctx.me, res), 1)
        fresh = pct(pair, 0.5)
    total = 100 * per
    ctx.add(
        g,
        name=f"claim.check of a free path beside {total:,} live claims",
        value=c10k,
        unit="s",
        floor="E p50",
        floor_value=e50,
        limit=2.0,
        note="100 sessions x 100 claims, 8 levels deep; the path overlaps none of them",
    )
    ctx.add(
        g,
        name=f"claim.check of a free path: {total:,} live claims vs 100",
        value=c10k,
        unit="s",
        floor="check@100",
        floor_value=c100,
        limit=1.2,
    )
    ctx.add(
        g,
        name="claim or release round trip p50 (each durable)",
        value=fresh,
        unit="s",
        floor="E+W1",
        floor_value=(e50 + w1) if e50 and w1 else None,
        limit=1.5,
    )
    hist = 1000 if ctx.quick else 100_000  # finished claims: one acquire + release each
    frames = []
    for k in range(hist):
        res = [f"file:/bench/hist/f{k}"]
        frames += [acquire(ctx.me, res), release(ctx.me, res)]
        if k % 1000 == 999:  # the build can outlast the session's 10 minutes under load
            frames.append(rpc("session.heartbeat", {"session_id": ctx.me}))
    _ok(pipeline(c, frames, group=200))
    with pinned(LAT_CPUS, ctx.meshd.pid):
        pair = []
        for k in range(n // 4):
            res = [f"file:/bench/solo2/f{k}"]
            pair += time_roundtrips(c, acquire(ctx.me, res), 1)
            pair += time_roundtrips(c, release(ctx.me, res), 1)
    ctx.add(
        g,
        name=f"claim or release round trip p50, {hist:,} finished claims in history",
        value=pct(pair, 0.5),
        unit="s",
        floor="empty history",
        floor_value=fresh,
        limit=1.1,
        note="claims only, no messages",
    )
    if ctx.pinning == "pinned":  # a throughput row: servers on one CPU, load on the other
        _mix(ctx, register_many, e99)
    _waiter(ctx, e50, w1)
    _ranked(ctx, c)
    c.close()


def _ranked(ctx: Ctx, c: LineClient) -> None:
    """claim + release while ranks are in play (SPEC §5b) vs the same with every rank 0.

    Twenty sessions hold and queue for one key at ranks -2..2 (all 0 in the rank-free
    rounds) and the measuring session is ranked 3; rounds alternate so both figures
    see the same machine.
    """
    from bench.targets import register_many

    ids = [f"rank{i}" for i in range(20)]
    register_many(ctx.sock, ids)
    contended = ["res:bench-ranked"]
    _ok([json.loads(c.roundtrip(acquire(ids[0], contended)))])
    queue = LineClient(ctx.sock, timeout=60)
    queue.sock.sendall(b"".join(acquire(sid, contended, wait=600) for sid in ids[1:]))

    def rank(sid: str, n: int) -> bytes:
        return rpc("session.prioritize", {"session_id": sid, "rank": n, "by": "bench"})

    free: list[float] = []
    ranked: list[float] = []
    n = ctx.n.lat_n // 8
    try:
        for r in range(ctx.n.rounds):
            for figures, ranks in ((free, [0] * 20 + [0]), (ranked, [*range(-2, 3)] * 4 + [3])):
                _ok(
                    [
                        json.loads(c.roundtrip(rank(sid, k)))
                        for sid, k in zip([*ids, ctx.me], ranks, strict=True)
                    ]
                )
                with pinned(LAT_CPUS, ctx.meshd.pid):
                    for k in range(n):
                        res = [f"file:/bench/ranked/{r}/{ranks[-1]}/f{k}"]
                        figures.extend(time_roundtrips(c, acquire(ctx.me, res), 1))
                        figures.extend(time_roundtrips(c, release(ctx.me, res), 1))
    finally:
        queue.close()
        c.roundtrip(release(ids[0], contended))
        c.roundtrip(rank(ctx.me, 0))
    ctx.add("claims", name="claim or release round trip p50, every rank 0", value=pct(free, 0.5),
            unit="s", note="floor")  # fmt: skip
    ctx.add("claims", name="claim or release round trip p50, ranks in play", value=pct(ranked, 0.5),
            unit="s", floor="rank-free", floor_value=pct(free, 0.5), limit=1.1)  # fmt: skip


def _mix(ctx: Ctx, register_many: Any, e99: float | None) -> None:
    g = "claims"
    ids = [f"mix{i}" for i in range(100)]
    register_many(ctx.sock, ids)
    frames: list[list[bytes]] = []
    for i, sid in enumerate(ids):
        if i % 20 == 0:
            res = [f"file:/bench/mix/f{i}"]
            frames.append([acquire(sid, res), release(sid, res)])
        else:
            frames.append([rpc("session.heartbeat", {"session_id": sid})])
    hb = [[rpc("session.heartbeat", {"session_id": sid})] for sid in ids]
    e, m = [], []
    try:
        pin(ctx.echo.pid, SERVER_CPUS)
        pin(ctx.meshd.pid, SERVER_CPUS)
        pin(0, CLIENT_CPUS)
        for _ in range(ctx.n.rounds):
            e.append(load.drive(ctx.echo_path, hb, ctx.n.dur))
            m.append(load.drive(ctx.sock, frames, ctx.n.dur))
    finally:
        for p in (0, ctx.echo.pid, ctx.meshd.pid):
            pin(p, all_cpus())
    ctx.add(
        g,
        name="100 clients (95 heartbeating, 5 claiming + releasing): requests/s",
        value=median([r.rate for r in m]),
        unit="req/s",
        floor="E@100",
        floor_value=median([r.rate for r in e]),
        limit=0.6,
        kind="min",
    )
    ctx.add(
        g,
        name="100 clients (95 heartbeating, 5 claiming + releasing): p99",
        value=median([r.p99 for r in m]),
        unit="s",
        floor="E p99@100",
        floor_value=median([r.p99 for r in e]),
        limit=2.0,
    )


def _waiter(ctx: Ctx, e50: float | None, w1: float | None) -> None:
    """Time from sending a release to the queued waiter's grant arriving."""
    g = "claims"
    from bench.targets import register_many

    register_many(ctx.sock, ["waitA", "waitB"])
    a, b = LineClient(ctx.sock), LineClient(ctx.sock)
    times = []
    with pinned(LAT_CPUS, ctx.meshd.pid):
        for k in range(20 if ctx.quick else 200):
            res = [f"file:/bench/wait/f{k}"]
            a.roundtrip(acquire("waitA", res))
            b.sock.sendall(acquire("waitB", res, wait=10))
            time.sleep(0.002)  # let the daemon queue B
            t = time.perf_counter()
            a.roundtrip(release("waitA", res))
            reply = json.loads(b.roundtrip(b""))
            times.append(time.perf_counter() - t)
            b.roundtrip(release("waitB", res))
            if reply.get("result", {}).get("status") != "granted":
                raise RuntimeError(f"waiter not granted: {reply}")
    a.close()
    b.close()
    floor = (e50 + w1 + 0.001) if e50 and w1 else None
    ctx.add(
        g,
        name="queued waiter granted, from sending the release",
        value=median(times),
        unit="s",
        floor="E+W1+1ms",
        floor_value=floor,
        limit=1.0,
    )


def _ask(ctx: Ctx) -> None:
    """query.ask round trip answered by a live responder process, all on one CPU.

    Beside it, in alternate rounds, E3: the echo server relaying the same frames to the
    same responder script (ask -> event -> answer -> reply), the least a daemon with a
    responder in a third process can take: the row's floor (BENCH.md: <= 1.2x E3).
    Asks go in blocks of 20, the two sides alternating which goes first; the spread
    is the lowest and highest ratio of a block's medians.
    """
    import subprocess

    from bench.common import PYTHON, ROOT
    from bench.targets import register_many

    e50, _, _ = _floors(ctx)
    n = 40 if ctx.quick else 400
    askers = [f"asker{i}" for i in range(n // 20 + 1)]  # under the per-minute budget
    register_many(ctx.sock, ["responder", *askers])
    resps = [
        subprocess.Popen([PYTHON, "-m", "bench.responder", path, "responder"], cwd=ROOT,
                         env=ctx.place.child_env())
        for path in (ctx.sock, ctx.echo_path)
    ]  # fmt: skip
    c, e = LineClient(ctx.sock, timeout=30), LineClient(ctx.echo_path, timeout=30)
    times: list[float] = []
    relayed: list[float] = []
    try:
        for client in (c, e):  # each responder subscribed (a slow start on a loaded machine)
            _until_answered(client, askers[-1])
        with pinned(LAT_CPUS, ctx.meshd.pid, ctx.echo.pid, *(r.pid for r in resps)):
            for k in range(n):
                frame = rpc(ASK, {"session_id": askers[k // 20], "to": "responder",
                                  "question": "what are you doing?", "timeout": 5})  # fmt: skip
                for client, out in (
                    ((c, times), (e, relayed)) if k // 20 % 2 else ((e, relayed), (c, times))
                ):
                    t = time.perf_counter()
                    reply = json.loads(client.roundtrip(frame))
                    out.append(time.perf_counter() - t)
                    by = reply.get("result", {}).get("answered_by")
                    if by != "session":
                        raise RuntimeError(f"ask not answered by the live responder: {reply}")
    finally:
        c.close()
        e.close()
        for r in resps:
            r.terminate()
            r.wait()
    blocks = range(0, len(times), 20)
    ours = [median(times[i : i + 20]) for i in blocks]
    floor = [median(relayed[i : i + 20]) for i in blocks]
    ctx.add("claims", name="E3: the echo server relaying the same ask to the same responder p50",
            value=median(relayed), unit="s", floor="E p50", floor_value=e50,
            note="the ask's floor: three processes, four hops, no mesh work")  # fmt: skip
    ctx.add("claims", name="query.ask answered by a live responder p50", value=median(times),
            unit="s", floor="E3 p50", floor_value=median(relayed), limit=1.2,
            spread=spread(ours, floor),
            note=f"responder: bench/responder.py, a stdlib script; "
            f"{median(times) / e50:.2f}x E")  # fmt: skip


def _until_answered(client: LineClient, asker: str, timeout: float = 60.0) -> None:
    """Ask until the live responder answers (its process subscribed)."""
    frame = rpc(ASK, {"session_id": asker, "to": "responder", "question": "ready?", "timeout": 5})
    end = time.monotonic() + timeout
    while json.loads(client.roundtrip(frame)).get("result", {}).get("answered_by") != "session":
        if time.monotonic() > end:
            raise RuntimeError("the responder did not subscribe")
        time.sleep(0.05)


def _fanout(path: str, socks: list[Any], frame: bytes, rounds: int) -> list[float]:
    """Send ``frame`` on a connection of its own; time until every socket got a line."""
    import select

    sender = LineClient(path, timeout=60)
    ep = select.epoll()
    index = {s.fileno(): s for s in socks}
    for s in socks:
        s.setblocking(False)
        ep.register(s.fileno(), select.EPOLLIN)
    out = []
    for _ in range(rounds):
        waiting = set(index)
        t = time.perf_counter()
        sender.sock.sendall(frame)
        deadline = t + 30
        while waiting and time.perf_counter() < deadline:
            for fd, _ in ep.poll(1.0):
                if b"\n" in index[fd].recv(1 << 16):
                    waiting.discard(fd)
        out.append(time.perf_counter() - t)
        if waiting:
            raise RuntimeError(f"{len(waiting)} subscribers got nothing")
        sender.roundtrip(b"")  # the sender's own reply
        time.sleep(0.2)
        for s in socks:  # drain stragglers (a subscriber may get more than one line)
            try:
                while s.recv(1 << 16):
                    pass
            except BlockingIOError:
                pass
    ep.close()
    sender.close()
    return out


def subscribe_all(path: str, ids: list[str]) -> list[Any]:
    """Register ``caster`` and ``ids``; one connection per id, each subscribed to its
    own session's events (the broadcast row's subscribers)."""
    from bench.targets import register_many

    register_many(path, ["caster", *ids])
    subs = load.connect_all(path, len(ids))
    for s, sid in zip(subs, ids, strict=True):
        c = LineClient.__new__(LineClient)
        c.sock, c.buf = s, b""
        reply = json.loads(c.roundtrip(rpc(SUBSCRIBE, {"session_id": sid})))
        if "error" in reply:
            raise RuntimeError(f"subscribe failed: {reply}")
    return subs


def _broadcast(ctx: Ctx) -> None:
    """broadcast.send to N subscribed sessions until the last has it, vs the echo fan-out."""
    from bench.targets import pipeline

    n = 100 if ctx.quick else 1000
    rounds = 2 if ctx.quick else 5
    ids = [f"sub{i}" for i in range(n)]
    subs = subscribe_all(ctx.sock, ids)
    echo_subs = load.connect_all(ctx.echo_path, n)
    frame = rpc(BROADCAST, {"session_id": "caster", "text": "heads up: rebasing main"})
    floor, mine = [], []
    try:
        with pinned(LAT_CPUS, ctx.meshd.pid, ctx.echo.pid):
            for _ in range(rounds):
                floor += _fanout(ctx.echo_path, echo_subs, rpc("fanout"), 1)
                mine += _fanout(ctx.sock, subs, frame, 1)
    finally:
        for s in subs + echo_subs:
            s.close()
        c = LineClient(ctx.sock, timeout=60)
        pipeline(c, [rpc("session.end", {"session_id": sid}) for sid in ids])
        c.close()
    ctx.add("claims", name=f"E: echo writing one line to each of {n:,} connections",
            value=median(floor), unit="s", note="floor")  # fmt: skip
    ctx.add("claims", name=f"broadcast to {n:,} subscribed sessions, until the last has it",
            value=median(mine), unit="s", floor="fan-out", floor_value=median(floor),
            limit=2.0)  # fmt: skip
