"""Claim round trip with and without a long finished history, interleaved over trees.

``python -m bench.hist_ab A=tree B=tree``: each tree gets its own meshd (its ``src``
first on ``PYTHONPATH``), 100 holders with 10,000 live claims as in bench/claims.py,
then claim or release round trips (the "empty history" floor), then 100,000
acquire+release pairs, then the same round trips again. Rounds alternate between
trees so the shared machine's load falls on all alike; it prints the medians and
the ratio the claims row uses (history / empty history, target <= 1.1).
"""

from __future__ import annotations

import os
import sys

from bench.ab_writes import start, trees_of
from bench.claims import _ok, acquire, deep, release
from bench.common import LAT_CPUS, LineClient, Place, Proc, median, pct, pinned, time_roundtrips
from bench.targets import pipeline, register_many


def pairs(c: LineClient, pid: int, tag: str, n: int) -> list[float]:
    out: list[float] = []
    with pinned(LAT_CPUS, pid):
        for k in range(n):
            res = [f"file:/bench/{tag}/f{k}"]
            out += time_roundtrips(c, acquire("me", res), 1)
            out += time_roundtrips(c, release("me", res), 1)
    return out


def main(argv: list[str]) -> None:
    rounds = int(os.environ.get("AB_ROUNDS", "5"))
    n = int(os.environ.get("AB_PAIRS", "200"))
    hist = int(os.environ.get("AB_HIST", "100000"))
    trees = trees_of(argv)
    place = Place()
    procs: dict[str, tuple[Proc, LineClient]] = {}
    fresh: dict[str, list[float]] = {k: [] for k in trees}
    after: dict[str, list[float]] = {k: [] for k in trees}
    try:
        for label, tree in trees.items():
            p, s = start(place, label, tree, False)
            holders = [f"holder{i}" for i in range(100)]
            register_many(s, [*holders, "me"])
            c = LineClient(s, timeout=120)
            frames = [acquire(h, [deep(i, j)]) for i, h in enumerate(holders) for j in range(100)]
            _ok(pipeline(c, frames))
            procs[label] = (p, c)
        for r in range(rounds):
            for label, (p, c) in procs.items():
                fresh[label].append(pct(pairs(c, p.pid, f"solo{r}", n), 0.5))
        for label, (_p, c) in procs.items():
            frames = []
            for k in range(hist):
                res = [f"file:/bench/hist/f{k}"]
                frames += [acquire("me", res), release("me", res)]
            _ok(pipeline(c, frames, group=200))
            print(f"{label}: history built", file=sys.stderr, flush=True)
        for r in range(rounds):
            for label, (p, c) in procs.items():
                after[label].append(pct(pairs(c, p.pid, f"solo2-{r}", n), 0.5))
    finally:
        for p, c in procs.values():
            c.close()
            p.stop()
        place.cleanup()
    for label in trees:
        f, a = median(fresh[label]), median(after[label])
        print(f"{label}: empty {f * 1e6:.1f} us, history {a * 1e6:.1f} us, ratio {a / f:.2f}x")
        print(f"  empty rounds {[round(x * 1e6, 1) for x in fresh[label]]}")
        print(f"  hist  rounds {[round(x * 1e6, 1) for x in after[label]]}")


if __name__ == "__main__":
    main(sys.argv[1:])
