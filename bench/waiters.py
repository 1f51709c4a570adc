"""10,000 waiters queued on one key: enqueue, then cancel all (BENCH.md).

A daemon of its own (its 10,001 sessions would weigh on other rows). One holder
keeps ``file:/bench/storm/N`` while N sessions each ask for it with a long wait,
100 pipelined requests per connection; "enqueue" is the time from the first
request sent until each connection's trailing ``mesh.ping`` is answered (requests
on a connection start in order, so its waits are queued by then), "cancel" the
time from closing those connections until ``mesh.info`` counts no waiter. The
same is done with N/10 waiters, and the target is near-linear cost: 10x the
waiters within 15x the time. A prober
thread pings on a kept connection throughout, and its p99 is compared with the
same prober's p99 on the idle daemon just before: nobody's storm may stall
everybody. The prober is a process of its own (see :class:`Prober`), and the pings
sent while the waiters queue and while they are withdrawn get info rows of their own.
Medians over the rounds; the daemon and this process are pinned the
same way for the idle and the storm measurement. The daemon's CPU time for each
phase is reported beside the wall time: on a shared, loaded machine it is the
steadier measure of how the cost grows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from bench.claims import acquire, release
from bench.common import (
    CLIENT_CPUS,
    PYTHON,
    ROOT,
    SERVER_CPUS,
    LineClient,
    all_cpus,
    cpu_ns,
    median,
    pct,
    pin,
    rpc,
)

if TYPE_CHECKING:
    from bench.targets import Ctx

PER_CONNECTION = 100  # under the daemon's 128 requests in flight per connection


class Prober:
    """Pings on a kept connection until stopped; keeps every round-trip time.

    The pinging runs in a process of its own (``python -m bench.waiters PATH``), not a
    thread of the process that drives the storm: a thread would share that process's
    GIL, and while the driver builds frames or parses replies a ping's reply would wait
    up to the 5 ms switch interval for the GIL. Measured on an idle daemon: a prober
    thread beside a busy main thread read p99 8-15 ms against 0.27-0.29 ms alone; that
    is the harness's lock, not the daemon's stall. The process is pinned with this one
    (it inherits the affinity), so the storm's driver and the prober share a CPU the
    same way for the idle and the storm measurement.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.times: list[float] = []
        """Each ping's latency, with the pings a stall kept from being sent (see :func:`_probe`)."""
        self.round_trips: list[float] = []
        """Each ping's plain round trip (what the prober measured before 2026-12-01 13:00)."""
        self.samples: list[tuple[float, float]] = []
        """(start, latency) of each ping, ``time.perf_counter`` seconds (the same
        monotonic clock in every process on Linux): where in a storm the slow ones were."""
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Prober:
        self._proc = subprocess.Popen(
            [PYTHON, "-m", "bench.waiters", self.path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
        assert self._proc.stdout is not None
        if self._proc.stdout.readline() != b"ready\n":  # connected and pinging
            raise RuntimeError("the prober did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self._proc
        assert proc is not None
        out, _ = proc.communicate(b"stop\n", timeout=120)
        rows = [[float(f) for f in line.split()] for line in out.splitlines()]
        self.samples = [(t, x) for t, x, _sent in rows]
        self.times = [x for _t, x, _sent in rows]
        self.round_trips = [x for _t, x, sent in rows if sent]


PROBE_PERIOD = 0.002
"""The prober's schedule: a ping every 2 ms. Well above a ping's round trip in the
storm (0.5-1.5 ms: it waits its turn), so that only stalls count for missed pings."""


def _probe(path: str) -> None:
    """The prober process: a ping every :data:`PROBE_PERIOD`, until a line arrives on
    stdin; then print one line a sample: its time, its latency (seconds) and 1 for a
    ping sent, 0 for one its schedule missed.

    A prober that waits for each reply sends nothing while the daemon stalls, so a
    15 ms stall was one slow sample where requests arriving during it wait 7.5 ms on
    average ("coordinated omission"). As HdrHistogram's expected-interval correction
    does, a round trip L longer than the period also counts the pings that were due
    meanwhile, with L - P, L - 2P, ... (> 0), and the schedule goes on from the reply
    (the missed ones are not sent late: that would queue them behind each other on one
    connection, which no independent caller does)."""
    if os.environ.get("BENCH_PROBER_NICE"):  # bench.storm_ab --boost
        os.setpriority(os.PRIO_PROCESS, 0, int(os.environ["BENCH_PROBER_NICE"]))
    c = LineClient(path, timeout=60)
    frame = rpc("mesh.ping")
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    rows: list[str] = []
    clock = time.perf_counter
    period = PROBE_PERIOD
    c.roundtrip(frame)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    due = clock()
    while not stop.is_set():
        t = clock()
        if t < due:
            time.sleep(due - t)
            t = clock()
        c.roundtrip(frame)
        done = clock()
        rt = done - t
        rows.append(f"{t!r} {rt!r} 1\n")
        missed = rt - period
        k = 1
        while missed > 0:
            rows.append(f"{t + k * period!r} {missed!r} 0\n")
            missed -= period
            k += 1
        due = max(due + period, done)
    c.close()
    sys.stdout.write("".join(rows))


def _waiters(ctl: LineClient) -> int:
    return int(json.loads(ctl.roundtrip(rpc("mesh.info")))["result"]["counts"]["waiters"])


def _until(ctl: LineClient, done: Callable[[int], bool], timeout: float = 600.0) -> float:
    """Poll ``mesh.info`` until ``done(waiters)``; the time it took. The gap grows with
    the time taken (2 ms, then a twentieth of it): ``mesh.info`` counts stale sessions,
    O(sessions), and polling it every few ms would load the daemon in proportion to
    the waiters twice over. The figure is at most ~5 % late."""
    t0 = time.perf_counter()
    while not done(_waiters(ctl)):
        elapsed = time.perf_counter() - t0
        if elapsed > timeout:
            raise RuntimeError("the waiter storm did not settle")
        time.sleep(max(0.002, elapsed / 20))
    return time.perf_counter() - t0


def storm(
    path: str, n: int, tag: str, pid: int = 0, mark: Callable[[str], None] | None = None
) -> tuple[float, float, float, float]:
    """Queue ``n`` waiters on one key, then drop their connections: wall seconds of
    enqueue and cancel, and the daemon's (``pid``) CPU seconds for each. ``mark(phase)``
    is called as each phase ends (``bench.storm_gc`` reads the daemon's counts there)."""
    from bench.targets import end_many, pipeline, register_many

    ids = [f"{tag}w{i}" for i in range(n)]
    holder = f"{tag}holder"
    register_many(path, [holder, *ids])
    ctl = LineClient(path, timeout=60)
    key = f"file:/bench/storm/{tag}"
    pipeline(ctl, [acquire(holder, [key])])
    if mark is not None:
        mark("registered")
    conns = []
    cpu0 = cpu_ns(pid) if pid else 0.0
    t0 = time.perf_counter()
    for i in range(0, n, PER_CONNECTION):
        c = LineClient(path, timeout=600)
        frames = [acquire(sid, [key], wait=600) for sid in ids[i : i + PER_CONNECTION]]
        c.sock.sendall(b"".join([*frames, rpc("mesh.ping", rid=0)]))
        conns.append(c)
    for c in conns:  # a connection's requests start in order: its ping comes back once
        c.roundtrip(b"")  # its waits are queued (no polling of mesh.info, O(sessions))
    enqueue = time.perf_counter() - t0
    assert _waiters(ctl) == n
    if mark is not None:
        mark("enqueue")
    cpu1 = cpu_ns(pid) if pid else 0.0
    t1 = time.perf_counter()
    for c in conns:
        c.close()
    _until(ctl, lambda w: w == 0)
    cancel = time.perf_counter() - t1
    cpu2 = cpu_ns(pid) if pid else 0.0
    if mark is not None:
        mark("cancel")
    pipeline(ctl, [release(holder, [key])])
    ctl.close()
    end_many(path, [holder, *ids])
    return enqueue, cancel, cpu1 - cpu0, cpu2 - cpu1


def run(ctx: Ctx) -> None:
    from bench.common import start_meshd

    g = "waiters"
    big = 1000 if ctx.quick else 10_000
    small = big // 10
    rounds = 1 if ctx.quick else 3
    proc, path = start_meshd(ctx.place, "waiters")
    got: dict[str, list[float]] = {}
    try:
        pin(proc.pid, SERVER_CPUS)
        pin(0, CLIENT_CPUS)
        storm(path, small, "warm")  # warm-up: code paths, allocator
        for r in range(rounds):
            with Prober(path) as idle:
                time.sleep(1.0)
            for size, n in (("small", small), ("big", big)):
                marks: dict[str, float] = {}

                def mark(phase: str, marks: dict[str, float] = marks) -> None:
                    marks[phase] = time.perf_counter()

                with Prober(path) as busy:
                    figures = storm(path, n, f"{size}{r}", proc.pid, mark=mark)
                for phase, t0, t1 in (("enqueue", "registered", "enqueue"),
                                      ("cancel", "enqueue", "cancel")):  # fmt: skip
                    during = [x for t, x in busy.samples if marks[t0] <= t < marks[t1]]
                    if during:
                        got.setdefault(f"{phase} p99 {size}", []).append(pct(during, 0.99))
                for what, x in zip(("enqueue", "cancel", "enqueue cpu", "cancel cpu"), figures,
                                   strict=True):  # fmt: skip
                    got.setdefault(f"{what} {size}", []).append(x)
            got.setdefault("idle p99", []).append(pct(idle.times, 0.99))
            got.setdefault("storm p99", []).append(pct(busy.times, 0.99))
            got.setdefault("idle rt p99", []).append(pct(idle.round_trips, 0.99))
            got.setdefault("storm rt p99", []).append(pct(busy.round_trips, 0.99))
    finally:
        for p in (0, proc.pid):
            pin(p, all_cpus())
        proc.stop()
    m = {k: median(v) for k, v in got.items()}
    label = {"enqueue": "enqueue, wall", "cancel": "cancel, wall",
             "enqueue cpu": "enqueue, daemon CPU", "cancel cpu": "cancel, daemon CPU"}  # fmt: skip
    for what in ("enqueue", "cancel", "enqueue cpu", "cancel cpu"):
        ctx.add(g, name=f"{small:,} waiters on one key: {label[what]}", value=m[f"{what} small"],
                unit="s", note="floor")  # fmt: skip
        ctx.add(g, name=f"{big:,} waiters on one key: {label[what]} (10x the waiters)",
                value=m[f"{what} big"], unit="s", floor=f"{what}@{small:,}",
                floor_value=m[f"{what} small"], limit=15.0)  # fmt: skip
    for phase, what in (("enqueue", "while they queue"), ("cancel", "while they are withdrawn")):
        if f"{phase} p99 big" in m:
            ctx.add(g, name=f"mesh.ping p99 {what} ({big:,} waiters)", unit="s",
                    value=m[f"{phase} p99 big"])  # fmt: skip
    ctx.add(g, name=f"mesh.ping round trip p99 during the {big:,}-waiter storm, not counting "
            "the wait of pings a stall kept from being sent", value=m["storm rt p99"], unit="s",
            floor="idle rt p99", floor_value=m["idle rt p99"])  # fmt: skip
    ctx.add(g, name="mesh.ping p99, idle daemon", value=m["idle p99"], unit="s", note="floor")
    ctx.add(g, name=f"mesh.ping p99 during the {big:,}-waiter storm (a ping every 2 ms, "
            "a stall counts the pings it kept back)", value=m["storm p99"],
            unit="s", floor="idle p99", floor_value=m["idle p99"], limit=2.0)  # fmt: skip


if __name__ == "__main__":
    _probe(sys.argv[1])
