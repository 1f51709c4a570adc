"""The blocking client's round trip, tree against tree, in one interleaved run.

``python -m bench.mesh_ab LABEL=TREE [LABEL=TREE …] [--rounds N] [--n N] [--list]``: one
meshd (this tree's) and floor E's echo server; for each tree a worker process whose
``PYTHONPATH`` puts that tree's ``src`` first, so it runs that tree's ``meshctl.Mesh``.
Round by round, E and then each worker time ``N`` heartbeats through ``Mesh.call`` on
one thread (all pinned to one CPU, BENCH.md); printed: the medians over rounds of
each round's p50 and p99, as ratios to E and to the first tree. ``--list`` times
``session.list`` of 10 sessions instead (``N`` / 4 a round, as ``bench --only
latency`` does; every session registered with the latency section's fields). Guards the single-
thread fast path of ``Mesh.call`` when the client's connection changes (replies
matched by id so threads can share a Mesh: docs/PERFORMANCE.md).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from bench.ab_writes import trees_of
from bench.common import (
    LAT_CPUS,
    PYTHON,
    LineClient,
    Place,
    median,
    pct,
    pinned,
    rpc,
    start_echo,
    start_meshd,
    time_roundtrips,
)
from bench.targets import SESSION, register_many

WORKER = """
import json, sys, time
from meshctl import Mesh
mesh = Mesh("bench", socket=sys.argv[1], autostart=False)
sid, fields, method = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
mesh.call("session.register", {"session_id": sid, "liveness": "heartbeat", **fields})
params = {"session_id": sid} if method == "session.heartbeat" else None
clock, call = time.perf_counter, mesh.call
print("ready", flush=True)
for line in sys.stdin:
    out = []
    for _ in range(int(line)):
        t = clock()
        call(method, params)
        out.append(clock() - t)
    print(" ".join(map(repr, out)), flush=True)
"""


class Worker:
    """One tree's ``Mesh`` in a process of its own, timing heartbeats on request."""

    def __init__(self, place: Place, label: str, tree: str, sock: str, method: str) -> None:
        env = place.child_env()
        env["PYTHONPATH"] = f"{tree}/src"
        fields = SESSION if method == "session.list" else {"task": f"ab-{label}"}
        self.p = subprocess.Popen(
            [PYTHON, "-c", WORKER, sock, f"ab-{label}", json.dumps(fields), method],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.p.stdout is not None
        if self.p.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {label} worker did not start (tree {tree})")

    def times(self, n: int) -> list[float]:
        assert self.p.stdin is not None
        assert self.p.stdout is not None
        self.p.stdin.write(f"{n}\n")
        self.p.stdin.flush()
        return [float(x) for x in self.p.stdout.readline().split()]

    def stop(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.close()
        self.p.wait(10)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.mesh_ab", description=__doc__)
    ap.add_argument("trees", nargs="+", metavar="LABEL=TREE")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--n", type=int, default=2000, help="heartbeats per round and tree")
    ap.add_argument("--list", action="store_true", help="time session.list of 10 sessions")
    args = ap.parse_args(argv)
    trees = trees_of(args.trees)
    method, n = ("session.list", args.n // 4) if args.list else ("session.heartbeat", args.n)
    place = Place()
    meshd, sock = start_meshd(place)
    echo, echo_path = start_echo(place)
    workers = {lb: Worker(place, lb, str(tree), sock, method) for lb, tree in trees.items()}
    if args.list:  # the workers' sessions and these make 10
        register_many(sock, [f"ab-x{i}" for i in range(max(0, 10 - len(workers)))])
    acc: dict[str, list[float]] = {}

    def keep(key: str, times: list[float]) -> None:
        acc.setdefault(key + ".p50", []).append(pct(times, 0.5))
        acc.setdefault(key + ".p99", []).append(pct(times, 0.99))

    e, raw = LineClient(echo_path), LineClient(sock)
    hb = rpc("session.heartbeat", {"session_id": "ab-e"})
    first = next(iter(trees))
    frame = rpc(method, {"session_id": f"ab-{first}"} if not args.list else None)
    pids = [meshd.pid, echo.pid, *(w.p.pid for w in workers.values())]
    try:
        with pinned(LAT_CPUS, *pids):
            for _ in range(args.rounds):
                keep("E", time_roundtrips(e, hb, args.n))
                keep("raw", time_roundtrips(raw, frame, n))
                for label, w in workers.items():
                    keep(label, w.times(n))
    finally:
        e.close()
        raw.close()
        for w in workers.values():
            w.stop()
        echo.stop()
        meshd.stop()
        place.cleanup()
    med = {k: median(v) for k, v in acc.items()}
    print(f"{method} via Mesh.call, {args.rounds} rounds of {n}, medians of round p50/p99")
    print(f"  E (echo floor): p50 {med['E.p50'] * 1e6:.1f} us  p99 {med['E.p99'] * 1e6:.1f} us")
    raw50 = med["raw.p50"]
    print(f"  raw frame (no client): p50 {raw50 * 1e6:.1f} us ({raw50 / med['E.p50']:.2f}x E)")
    for label in trees:
        p50, p99 = med[label + ".p50"], med[label + ".p99"]
        print(
            f"  {label}: p50 {p50 * 1e6:.1f} us ({p50 / med['E.p50']:.2f}x E, "
            f"{p50 / med[first + '.p50']:.3f}x {first})  p99 {p99 * 1e6:.1f} us "
            f"({p99 / med['E.p99']:.2f}x E)"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
