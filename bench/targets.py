"""The sections of one run: each measures its floors and its targets side by side.

Sections share one :class:`Ctx` (the echo server, the daemon under test, the
report, the counts). Latency rows pin client and servers to one CPU; throughput
rows put the servers on one CPU and the load generator on the other
(BENCH.md: pinning decides a round trip by 5x, so both sides of a ratio are
pinned the same way). Rounds are interleaved and medians quoted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import floors, load, stall
from bench.common import (
    CLIENT_CPUS,
    LAT_CPUS,
    PYTHON,
    ROOT,
    SERVER_CPUS,
    LineClient,
    Place,
    Proc,
    cpu_ns,
    median,
    pct,
    pin,
    pinned,
    rpc,
    rss_bytes,
    start_echo,
    start_meshd,
    time_roundtrips,
    wait_answering,
)
from bench.report import Report, Row, spread

SESSION = {
    "source": "cli",
    "task": "refactor the auth module and its tests",
    "cwd": "/home/user/project",
    "repo": "/home/user/project",
    "branch": "feat/auth",
    "model": "claude",
    "provider": "anthropic",
}


@dataclass
class Counts:
    lat_n: int
    rounds: int
    dur: float
    proc_n: int
    big: int
    conns: int
    starts: int
    gc_n: int

    @classmethod
    def make(cls, quick: bool) -> Counts:
        if quick:
            return cls(lat_n=200, rounds=2, dur=0.3, proc_n=3, big=300, conns=200, starts=2, gc_n=2)
        return cls(
            lat_n=4000, rounds=5, dur=2.0, proc_n=25, big=10_000, conns=1000, starts=7, gc_n=7
        )


@dataclass
class Ctx:
    quick: bool
    report: Report
    place: Place
    n: Counts
    echo: Proc
    echo_path: str
    meshd: Proc
    sock: str
    served: set[str] = field(default_factory=set)
    cache: dict[str, float] = field(default_factory=dict)
    me: str = "bench-me"
    #: "unpinned" in the pass that measures latency rows as a user runs them
    pinning: str = "pinned"

    def add(self, group: str, **kw: Any) -> Row:
        return self.report.add(Row(group=group, **kw))


# --- helpers ------------------------------------------------------------------------


def pipeline(c: LineClient, frames: list[bytes], group: int = 100) -> list[dict[str, Any]]:
    """Send frames ``group`` at a time on one connection; the decoded replies."""
    out = []
    for i in range(0, len(frames), group):
        chunk = frames[i : i + group]
        c.sock.sendall(b"".join(chunk))
        for _ in chunk:
            out.append(json.loads(c.roundtrip(b"")))
    return out


def register_many(path: str, ids: list[str], **extra: Any) -> None:
    c = LineClient(path, timeout=60)
    frames = [rpc("session.register", {**SESSION, **extra, "session_id": sid}) for sid in ids]
    bad = [r for r in pipeline(c, frames) if "error" in r]
    c.close()
    if bad:
        raise RuntimeError(f"register failed: {bad[0]}")


def end_many(path: str, ids: list[str]) -> None:
    c = LineClient(path, timeout=60)
    pipeline(c, [rpc("session.end", {"session_id": sid}) for sid in ids])
    c.close()


def timed_cpu(pid: int, fn: Callable[[], list[float]]) -> tuple[list[float], float]:
    """Run ``fn`` (returning per-request times); also the server CPU per request."""
    c0 = cpu_ns(pid)
    times = fn()
    return times, (cpu_ns(pid) - c0) / max(1, len(times))


def served_methods(path: str) -> set[str]:
    c = LineClient(path)
    reply = json.loads(c.roundtrip(rpc("mesh.schema")))
    c.close()
    return set(reply.get("result", {}).get("methods", {}))


# --- latency: round trips on a kept connection, same CPU ---------------------------------


def latency(ctx: Ctx) -> None:
    from meshctl import Mesh
    from meshctl._conn import loads_line

    n, sock = ctx.n.lat_n, ctx.sock
    hb_params = {"session_id": ctx.me}
    hb = rpc("session.heartbeat", hb_params)
    lst = rpc("session.list")
    ping = rpc("mesh.ping")
    e, m = LineClient(ctx.echo_path), LineClient(sock)
    mesh = Mesh("bench", socket=sock, autostart=False)
    # The library session takes the id of the raw one, so the list holds 10 sessions
    # (ended first: a live session's id is not registered again without taking it over).
    end_many(sock, [ctx.me])
    sess = mesh.session(session_id=ctx.me, heartbeat_interval=3600, **SESSION)
    acc: dict[str, list[float]] = {}
    listing = m.roundtrip(lst) + b"\n"  # the bytes the client decodes for the listing

    def decode_times(k: int) -> list[float]:
        out, clock = [], time.perf_counter
        for _ in range(k):
            t = clock()
            loads_line(listing)
            out.append(clock() - t)
        return out

    def raw_decoded_times(k: int) -> list[float]:
        """The raw frame with the client's decode of each reply as it comes, timed
        together: a client that works between round trips pays for it in the next
        one (the daemon's CPU wakes cold), which the two medians apart leave out."""
        out, clock, roundtrip = [], time.perf_counter, m.roundtrip
        for _ in range(k):
            t = clock()
            loads_line(roundtrip(lst))
            out.append(clock() - t)
        return out

    def keep(key: str, times: list[float]) -> None:
        acc.setdefault(key + ".p50", []).append(pct(times, 0.5))
        acc.setdefault(key + ".p99", []).append(pct(times, 0.99))

    def mesh_times(k: int, fn: Callable[[], Any]) -> list[float]:
        out, clock = [], time.perf_counter
        for _ in range(k):
            t = clock()
            fn()
            out.append(clock() - t)
        return out

    with pinned(LAT_CPUS, ctx.echo.pid, ctx.meshd.pid):
        sess.start()
        for _ in range(ctx.n.rounds):
            t, cpu = timed_cpu(ctx.echo.pid, lambda: time_roundtrips(e, hb, n))
            keep("E", t)
            acc.setdefault("E.cpu", []).append(cpu)
            t, cpu = timed_cpu(ctx.meshd.pid, lambda: time_roundtrips(m, hb, n))
            keep("raw.hb", t)
            acc.setdefault("hb.cpu", []).append(cpu)
            keep("raw.ping", time_roundtrips(m, ping, n))
            keep("mesh.hb", mesh_times(n, lambda: mesh.call("session.heartbeat", hb_params)))
            keep("sess.hb", mesh_times(n, sess.heartbeat))
            keep("raw.list", time_roundtrips(m, lst, n // 4))
            keep("mesh.list", mesh_times(n // 4, lambda: mesh.call("session.list")))
            keep("dec.list", decode_times(n // 4))
            keep("rawdec.list", raw_decoded_times(n // 4))
            t, cpu = timed_cpu(ctx.meshd.pid, lambda: time_roundtrips(m, lst, n // 4))
            acc.setdefault("list.cpu", []).append(cpu)
        sess.end()
    register_many(sock, [ctx.me])
    mesh.close()
    e.close()
    m.close()
    med = {k: median(v) for k, v in acc.items()}
    raw_dec = [r + d for r, d in zip(acc["raw.list.p50"], acc["dec.list.p50"], strict=True)]

    def rounds(key: str, floor: str = "E.p50") -> tuple[float, float] | None:
        return spread(acc[key], acc[floor])

    g = "latency"
    e50, e99 = med["E.p50"], med["E.p99"]
    ctx.add(g, name="E: echo round trip p50", value=e50, unit="s", note="floor")
    ctx.add(g, name="E: echo round trip p99", value=e99, unit="s", note="floor")
    ctx.add(g, name="E: echo server CPU per request", value=med["E.cpu"], unit="s", note="floor")
    ctx.add(
        g,
        name="heartbeat round trip via Mesh.call p50",
        value=med["mesh.hb.p50"],
        unit="s",
        floor="E p50",
        floor_value=e50,
        limit=1.5,
        spread=rounds("mesh.hb.p50"),
    )
    ctx.add(
        g,
        name="heartbeat round trip via Mesh.call p99",
        value=med["mesh.hb.p99"],
        unit="s",
        floor="E p99",
        floor_value=e99,
        limit=2.0,
        spread=rounds("mesh.hb.p99", "E.p99"),
    )
    ctx.add(
        g,
        name="heartbeat, raw frame p50",
        value=med["raw.hb.p50"],
        unit="s",
        floor="E p50",
        floor_value=e50,
        note="daemon alone, no client library",
    )
    ctx.add(
        g,
        name="heartbeat round trip via Session.heartbeat() p50",
        value=med["sess.hb.p50"],
        unit="s",
        floor="E p50",
        floor_value=e50,
    )
    ctx.add(
        g,
        name="mesh.ping, raw frame p50",
        value=med["raw.ping.p50"],
        unit="s",
        floor="E p50",
        floor_value=e50,
    )
    ctx.add(
        g,
        name="session.list of 10 sessions, raw frame p50",
        value=med["raw.list.p50"],
        unit="s",
        floor="E p50",
        floor_value=e50,
        limit=1.5,
        spread=rounds("raw.list.p50"),
        note=f"{len(listing):,} bytes a reply",
    )
    ctx.add(
        g,
        name="session.list: the client's decode of that reply p50",
        value=med["dec.list.p50"],
        unit="s",
        note="meshctl._conn.loads_line on the same bytes, in this process",
    )
    ctx.add(
        g,
        name="session.list: raw frame and the client's decode, in one loop p50",
        value=med["rawdec.list.p50"],
        unit="s",
        floor="raw p50 + decode p50",
        floor_value=median(raw_dec),
        note="what a client that decodes each reply pays beyond the two apart",
    )
    ctx.add(
        g,
        name="session.list of 10 sessions via Mesh.call p50",
        value=med["mesh.list.p50"],
        unit="s",
        floor="raw+decode in one loop",
        floor_value=med["rawdec.list.p50"],
        limit=1.2,
        spread=rounds("mesh.list.p50", "rawdec.list.p50"),
        note=f"{med['mesh.list.p50'] / e50:.2f}x E; "
        f"{med['mesh.list.p50'] / median(raw_dec):.2f}x the two medians apart",
    )
    ctx.add(
        g,
        name="daemon CPU per heartbeat",
        value=med["hb.cpu"],
        unit="s",
        floor="E cpu",
        floor_value=med["E.cpu"],
    )
    ctx.add(
        g,
        name="daemon CPU per session.list (10 sessions)",
        value=med["list.cpu"],
        unit="s",
        floor="E cpu",
        floor_value=med["E.cpu"],
    )
    share = med["hb.cpu"] * 1000 / 5.0 * 100
    ctx.add(
        g,
        name="1,000 sessions heartbeating every 5 s: daemon CPU",
        value=share,
        unit="%",
        note="of one core, computed from the CPU per heartbeat above",
    )
    ctx.cache["E.p50"] = e50
    ctx.cache["E.p99"] = e99


# --- throughput: 100 clients -------------------------------------------------------------


def _loaded(ctx: Ctx, n_conn: int, prefix: str) -> dict[str, list[load.LoadResult]]:
    ids = [f"{prefix}{i}" for i in range(n_conn)]
    register_many(ctx.sock, ids)
    frames = [[rpc("session.heartbeat", {"session_id": sid})] for sid in ids]
    res: dict[str, list[load.LoadResult]] = {"E": [], "meshd": [], "R": []}
    redis = floors.Redis(ctx.place) if floors.Redis.available() and n_conn <= 100 else None
    pids = [ctx.echo.pid, ctx.meshd.pid] + ([redis.proc.pid] if redis else [])
    try:
        for p in pids:
            pin(p, SERVER_CPUS)
        pin(0, CLIENT_CPUS)
        for _ in range(ctx.n.rounds):
            res["E"].append(load.drive(ctx.echo_path, frames, ctx.n.dur))
            if n_conn >= 1000:
                res.setdefault("accepted", [])
                socks = load.connect_all(ctx.sock, n_conn)
                r = load.drive(ctx.sock, frames, ctx.n.dur, socks=socks)
                c = LineClient(ctx.sock)
                info = json.loads(c.roundtrip(rpc("mesh.info")))["result"]
                c.close()
                ctx.cache["connections"] = info["counts"]["connections"]
                for s in socks:
                    s.close()
                res["meshd"].append(r)
            else:
                res["meshd"].append(load.drive(ctx.sock, frames, ctx.n.dur))
            if redis:
                rf = [[floors.Redis.FRAME]] * n_conn
                res["R"].append(load.drive(redis.path, rf, ctx.n.dur))
    finally:
        from bench.common import all_cpus

        for p in (0, *pids):
            pin(p, all_cpus())
        if redis:
            redis.stop()
        end_many(ctx.sock, ids)
    return res


def throughput(ctx: Ctx) -> None:
    g = "throughput"
    res = _loaded(ctx, 100, "t")
    e_rate = median([r.rate for r in res["E"]])
    e99 = median([r.p99 for r in res["E"]])
    m_rate = median([r.rate for r in res["meshd"]])
    m99 = median([r.p99 for r in res["meshd"]])
    ctx.add(g, name="E: echo throughput, 100 connections", value=e_rate, unit="req/s", note="floor")
    ctx.add(g, name="E: echo p99 under that load", value=e99, unit="s", note="floor")
    if res["R"]:
        ctx.add(
            g,
            name="R: Redis SET NX PX, 100 connections",
            value=median([r.rate for r in res["R"]]),
            unit="req/s",
            note="floor",
        )
    else:
        ctx.add(
            g, name="R: Redis SET NX PX", value=None, unit="req/s", skip="redis-server not on PATH"
        )
    ctx.add(
        g,
        name="100 clients on heartbeats: throughput",
        value=m_rate,
        unit="req/s",
        floor="E@100",
        floor_value=e_rate,
        limit=0.6,
        kind="min",
    )
    ctx.add(
        g,
        name="100 clients on heartbeats: p99",
        value=m99,
        unit="s",
        floor="E p99@100",
        floor_value=e99,
        limit=2.0,
    )
    ctx.cache["hb.rate"] = m_rate


def connections(ctx: Ctx) -> None:
    g = "connections"
    n = ctx.n.conns
    res = _loaded(ctx, n, "k")
    e_rate = median([r.rate for r in res["E"]])
    m_rate = median([r.rate for r in res["meshd"]])
    answered = min(r.answered for r in res["meshd"])
    ctx.add(
        g,
        name=f"{n} connections: time until every one was answered once",
        value=median([r.all_answered for r in res["meshd"]]),
        unit="s",
        floor="E",
        floor_value=median([r.all_answered for r in res["E"]]),
    )
    ctx.add(
        g, name=f"E: echo throughput, {n} connections", value=e_rate, unit="req/s", note="floor"
    )
    ctx.add(
        g,
        name=f"{n} connections: answered",
        value=answered,
        unit="",
        floor="opened",
        floor_value=n,
        limit=1.0,
        kind="min",
        note=f"mesh.info counted {ctx.cache.get('connections', 0):.0f}",
    )
    ctx.add(
        g,
        name=f"{n} connections on heartbeats: throughput",
        value=m_rate,
        unit="req/s",
        floor=f"E@{n}",
        floor_value=e_rate,
        limit=0.6,
        kind="min",
    )
    ctx.add(
        g,
        name=f"{n} connections: p99",
        value=median([r.p99 for r in res["meshd"]]),
        unit="s",
        floor=f"E p99@{n}",
        floor_value=median([r.p99 for r in res["E"]]),
    )


# --- durable writes --------------------------------------------------------------------------


def durable(ctx: Ctx) -> None:
    g = "durable"
    with pinned(LAT_CPUS):
        w1 = floors.w1(ctx.place.root / "w1.sqlite3", 200 if ctx.quick else 3000)
        wb = floors.wb(ctx.place.root / "wb.sqlite3", 5 if ctx.quick else 100)
        t = floors.handoff(500 if ctx.quick else 20000)
    ctx.cache["W1"] = w1
    ctx.add(g, name="W1: one row committed via a writer thread", value=w1, unit="s", note="floor")
    ctx.add(g, name="WB: 100 rows a commit, per row", value=wb, unit="s", note="floor")
    ctx.add(g, name="T: thread hand-off and back", value=t, unit="s", note="floor")
    if ctx.pinning == "pinned":  # throughput rows: servers on one CPU, load on the other
        _durable_rates(ctx)
    e50 = ctx.cache.get("E.p50")
    pair = [
        rpc("session.register", {**SESSION, "session_id": "lat-w"}),
        rpc("session.end", {"session_id": "lat-w"}),
    ]
    c = LineClient(ctx.sock)
    rt: list[float] = []
    with pinned(LAT_CPUS, ctx.meshd.pid):
        for _ in range(100 if ctx.quick else 2000):
            rt += time_roundtrips(c, pair[0], 1)
            rt += time_roundtrips(c, pair[1], 1)
    c.close()
    ctx.add(
        g,
        name="durable write round trip p50, 1 connection",
        value=pct(rt, 0.5),
        unit="s",
        floor="E+W1",
        floor_value=(e50 + w1) if e50 else None,
        note="register or end; what claim + release will cost",
    )


def _durable_rates(ctx: Ctx) -> None:
    """Durable writes/s at 1, 10 and 100 connections, with and without group commit."""
    g = "durable"
    nogc, nogc_sock = start_meshd(ctx.place, "nogc", variant=["--no-group-commit"])
    levels = [1, 10, 100]
    res: dict[tuple[str, int], list[load.LoadResult]] = {}
    try:
        for p in (ctx.meshd.pid, nogc.pid):
            pin(p, SERVER_CPUS)
        pin(0, CLIENT_CPUS)
        for _ in range(ctx.n.rounds):
            for lv in levels:
                frames = [
                    [
                        rpc("session.register", {**SESSION, "session_id": f"w{i}"}),
                        rpc("session.end", {"session_id": f"w{i}"}),
                    ]
                    for i in range(lv)
                ]
                for name, path in (("gc", ctx.sock), ("nogc", nogc_sock)):
                    res.setdefault((name, lv), []).append(load.drive(path, frames, ctx.n.dur))
    finally:
        from bench.common import all_cpus

        for p in (0, ctx.meshd.pid, nogc.pid):
            pin(p, all_cpus())
        nogc.stop()
    rate = {k: median([r.rate for r in v]) for k, v in res.items()}
    for lv in levels:
        ctx.add(
            g,
            name=f"durable writes/s, {lv} connection(s) registering + ending, group commit off",
            value=rate[("nogc", lv)],
            unit="req/s",
        )
        row: dict[str, Any] = {
            "name": f"durable writes/s, {lv} connection(s) registering + ending",
            "value": rate[("gc", lv)],
            "unit": "req/s",
        }
        if lv == 100:
            row.update(
                floor="no-group-commit", floor_value=rate[("nogc", lv)], limit=3.0, kind="min"
            )
        ctx.add(g, **row)
    hb_rate = ctx.cache.get("hb.rate")
    ctx.add(
        g,
        name="durable writes/s at 100 connections vs heartbeats/s at 100",
        value=rate[("gc", 100)],
        unit="req/s",
        floor="heartbeats@100",
        floor_value=hb_rate,
        limit=0.5,
        kind="min",
        skip="" if hb_rate else "needs the throughput section",
    )


# --- whole-process commands -----------------------------------------------------------------


def process(ctx: Ctx) -> None:
    g = "process"
    env = ctx.place.env("bench")
    env["MESH_SESSION"] = ctx.me
    meshctl = os.path.join(os.path.dirname(PYTHON), "meshctl")
    cmds = {
        "S": floors.s_argv(),
        # register, claim, run, release, end: what a cron wrapper pays every minute
        "run": [meshctl, "run", "--res", "res:bench-run", "--", "true"],
        "pass": [PYTHON, "-c", "pass"],
        "click": [PYTHON, "-c", "import click"],
        "meshctl.cli": [PYTHON, "-c", "import meshctl.cli"],
    }
    times: dict[str, list[float]] = {k: [] for k in cmds}
    with pinned(LAT_CPUS, ctx.meshd.pid):
        for argv in cmds.values():
            floors.run_times(argv, env, 2)  # warm-up: page cache, .pyc
        for _ in range(ctx.n.proc_n):
            for k, argv in cmds.items():
                times[k] += floors.run_times(argv, env, 1)
    s = median(times["S"])
    ctx.add(g, name="S: stdlib one-request script, whole process", value=s, unit="s", note="floor")
    ctx.add(
        g,
        name="meshctl run --res R -- true",
        value=median(times["run"]),
        unit="s",
        floor="S",
        floor_value=s,
        limit=3.5,
    )
    for key, what in (
        ("pass", "python -c pass (interpreter start-up)"),
        ("click", "python -c 'import click' (the CLI's floor)"),
        ("meshctl.cli", "python -c 'import meshctl.cli'"),
    ):
        ctx.add(g, name=what, value=median(times[key]), unit="s", floor="S", floor_value=s)


# --- 10,000 sessions: memory, snapshot stall, restore ---------------------------------------


def scale(ctx: Ctx) -> None:
    g = "scale"
    n = ctx.n.big
    interval = 0.5 if ctx.quick else 2.0
    conf = f"[defaults]\nsnapshot_interval = {interval}\n"
    with pinned(LAT_CPUS):
        floors.daemon_start(ctx.place, 999)  # warm-up: page cache, bytecode
        d = [floors.daemon_start(ctx.place, i) for i in range(ctx.n.starts)]
    ctx.add(
        g,
        name="D: minimal anyio daemon, exec to first answer",
        value=median(d),
        unit="s",
        note="floor",
    )
    big, path = start_meshd(ctx.place, "big", config_text=conf)
    empty_start = None
    try:
        time.sleep(0.5 if ctx.quick else 2.0)
        idle = rss_bytes(big.pid)
        register_many(path, [f"big{i}" for i in range(n)])
        time.sleep(0.3)
        per = (rss_bytes(big.pid) - idle) / n
        if ctx.pinning == "pinned":  # memory does not depend on where it runs
            ctx.add(g, name="idle RSS of a fresh daemon", value=idle, unit="B",
                    limit=35 * (1 << 20), absolute=True, pinning="-")  # fmt: skip
            ctx.add(g, name=f"daemon RSS growth per session, {n:,} registered", value=per,
                    unit="B", limit=1.6 * 1024, absolute=True, pinning="-")  # fmt: skip
        _stall(ctx, big, path, n, interval)
        big.stop()
        restarts = []
        cpu: list[float] = []
        d_round: list[float] = []  # D beside each restart: the row's floor
        d_cpu: list[float] = []
        env = ctx.place.env("big", conf)
        with pinned(LAT_CPUS):
            for i in range(ctx.n.starts):
                restarts.append(_restart(env, cpu, ctx.place.root / "big.log"))
                d_round.append(floors.daemon_start(ctx.place, 100 + i, d_cpu))
        big, path = start_meshd(ctx.place, "big", config_text=conf)
        c = LineClient(path)
        counts = json.loads(c.roundtrip(rpc("mesh.info")))["result"]["counts"]
        c.close()
        ctx.add(
            g,
            name=f"daemon start to first answer, {n:,} sessions to restore",
            value=median(restarts),
            unit="s",
            floor="D",
            floor_value=median(d_round),
            limit=2.0,
            note=f"{counts['sessions']:,} restored; CPU {median(cpu) / median(d_cpu):.2f}x",
        )
        empty_start, d_empty, cpu, d_cpu = _empty_start(ctx)
        ctx.add(
            g,
            name="daemon start to first answer, empty database (restarted on it)",
            value=empty_start,
            unit="s",
            floor="D",
            floor_value=median(d_empty),
            note=f"CPU {median(cpu) / median(d_cpu):.2f}x",
        )
    finally:
        big.stop()


def _restart(env: dict[str, str], cpu: list[float], log: Path | None = None) -> float:
    """Exec to first answer of a daemon on the database ``env`` names; its CPU seconds
    up to then go to ``cpu`` (wall time swings with the load of a shared machine, CPU
    time far less)."""
    t = time.monotonic()
    proc = Proc(
        [PYTHON, "-m", "meshd", "run", "--profile", "bench", "--log-level", "warning"], env, log
    )
    try:
        answered = wait_answering(env["MESH_SOCKET"], proc=proc.p)
        cpu.append(cpu_ns(proc.p.pid))
    finally:
        proc.stop()
    return answered - t


def _empty_start(ctx: Ctx) -> tuple[float, list[float], list[float], list[float]]:
    """Restarts on an empty database, each beside a D of its own: the median start,
    the D's, and both CPU times. The first start, which creates the database (six
    ``fdatasync``s: 20-30 ms of waiting on this disk), is not timed: the row compares
    with the 10,000-session restarts, which also find their database there."""
    times: list[float] = []
    d: list[float] = []
    cpu: list[float] = []
    d_cpu: list[float] = []
    env = ctx.place.env("empty")
    with pinned(LAT_CPUS):
        _restart(env, [])  # creates the database
        for i in range(ctx.n.starts):
            times.append(_restart(env, cpu))
            d.append(floors.daemon_start(ctx.place, 200 + i, d_cpu))
    return median(times), d, cpu, d_cpu


def _stall(ctx: Ctx, big: Proc, path: str, n: int, interval: float) -> None:
    """Ping p99/max while n sessions change their task every interval, vs. while they don't."""
    g = "scale"
    window = interval * (2.5 if ctx.quick else 3.5)
    echo, echo_path = start_echo(
        ctx.place,
        "stall",
        "--rows",
        str(n),
        "--interval",
        str(interval),
        "--db",
        str(ctx.place.root / "stall.sqlite3"),
    )
    out: dict[str, list[dict[str, float]]] = {}
    env = ctx.place.child_env()
    try:
        pin(big.pid, LAT_CPUS)
        pin(echo.pid, LAT_CPUS)
        for _ in range(max(1, ctx.n.rounds - 2)):
            for key, target, mode in (
                ("floor", echo_path, "change"),
                ("steady", path, "steady"),
                ("change", path, "change"),
            ):
                loader = subprocess.Popen(
                    [
                        PYTHON,
                        "-m",
                        "bench.stall",
                        target,
                        str(n),
                        str(interval),
                        str(window + 1),
                        mode,
                    ],
                    env=env,
                    cwd=ROOT,
                )
                pin(loader.pid, CLIENT_CPUS)
                with pinned(LAT_CPUS):
                    time.sleep(0.3)
                    out.setdefault(key, []).append(stall.probe(target, window))
                loader.send_signal(signal.SIGTERM)
                loader.wait()
    finally:
        echo.stop()
    m = {k: {q: median([r[q] for r in v]) for q in ("p50", "p99", "max")} for k, v in out.items()}
    ctx.add(
        g,
        name=f"ping max, worker thread writing {n:,} rows every {interval:g} s",
        value=m["floor"]["max"],
        unit="s",
        note="floor: echo server + writer thread",
    )
    ctx.add(
        g,
        name=f"ping max, {n:,} sessions unchanged (no snapshot rows)",
        value=m["steady"]["max"],
        unit="s",
    )
    ctx.add(
        g,
        name=f"snapshot stall: ping max, {n:,} sessions change task",
        value=m["change"]["max"],
        unit="s",
        floor="Wstall",
        floor_value=m["floor"]["max"],
        limit=2.0,
    )
    ctx.add(
        g,
        name="ping p99 while sessions change task",
        value=m["change"]["p99"],
        unit="s",
        floor="steady p99",
        floor_value=m["steady"]["p99"],
    )


# --- full GC pause (in-process) --------------------------------------------------------------


def gc_pause(ctx: Ctx) -> None:
    n = 10_000

    def run(*extra: str) -> dict[str, Any]:
        argv = [PYTHON, "-m", "bench.gcpause", str(n), str(ctx.n.gc_n), *extra]
        with pinned(LAT_CPUS):
            done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True)
        return dict(json.loads(done.stdout))

    res, frozen = run(), run("freeze")
    ctx.add(
        "gc",
        name=f"full GC pause, {n:,} sessions registered after gc.freeze() (as meshd runs)",
        value=frozen["pause"],
        unit="s",
        limit=0.002,
        absolute=True,
        note="gc.collect() in-process: meshd's modules frozen as meshd freezes them after "
        f"start-up, then {n:,} sessions through Registry.register on a ManualClock; "
        f"{frozen['objects']:,} tracked objects left; fastest of {ctx.n.gc_n}: "
        f"{frozen['min'] * 1e3:.2f} ms",
    )
    ctx.add(
        "gc",
        name=f"full GC pause, {n:,} sessions, nothing frozen",
        value=res["pause"],
        unit="s",
        note=f"what the start-up freeze saves: {res['objects']:,} tracked objects; "
        f"fastest: {res['min'] * 1e3:.2f} ms",
    )


SECTIONS: dict[str, Callable[[Ctx], None]] = {
    "latency": latency,
    "throughput": throughput,
    "connections": connections,
    "durable": durable,
    "process": process,
    "scale": scale,
    "gc": gc_pause,
}


def keep_alive(ctx: Ctx) -> None:
    """Heartbeat the bench's own session (registering it again if it expired): a long
    section on a loaded machine can outlast its 10 minutes without one. (Not before
    ``latency``, which takes the session over with the library: a fresh heartbeat makes
    it live, and a live session is not taken over.)"""
    c = LineClient(ctx.sock)
    try:
        reply = json.loads(c.roundtrip(rpc("session.heartbeat", {"session_id": ctx.me})))
    finally:
        c.close()
    if "error" in reply:
        register_many(ctx.sock, [ctx.me])


def setup(ctx_place: Place, report: Report, quick: bool) -> Ctx:
    """Start the echo floor and the daemon under test; register the 10 live sessions."""
    echo, echo_path = start_echo(ctx_place)
    meshd, sock = start_meshd(ctx_place)
    ctx = Ctx(quick, report, ctx_place, Counts.make(quick), echo, echo_path, meshd, sock)
    register_many(sock, [ctx.me] + [f"live{i}" for i in range(9)])
    ctx.served = served_methods(sock)
    return ctx
