"""Micro-benchmark of the pure lock table: does claim.check grow with the claim count?

Builds tables holding 100, 10,000 and 100,000 live claims on deep paths (nine
components, spread over 20 projects and 10,000 folders like a real tree). Each
table holds the same 100 probe claims, and the filler crowds the probes'
ancestors, so the queries walk the same depth and find the same hits whatever
the size: a new file beside a probe (0 hits), a probe's folder (1 hit, found
through the subtree), an exact key; plus an acquire + release cycle. Rounds are
interleaved across table sizes and the median per call is reported, with its
ratio to the 100-claim table. (Cost is O(depth + hits): a query that walks
deeper or finds more claims costs more, whatever the table size.)

BENCH.md's target for the daemon round trip is <= 1.2x between 100 and 10,000
claims; here, without the wire, the table's own cost must be flat.

    .venv/bin/python bench/claims_core.py [--rounds N]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from collections.abc import Callable

from meshd.core.claims.table import ClaimTable
from meshd.core.clock import ManualClock
from meshd.keys import Key, path_key

SIZES = (100, 10_000, 100_000)
PROBES = 100
CALLS = 2_000


def deep_path(rng: random.Random, i: int) -> str:
    parts = [
        "home",
        "u",
        f"proj{rng.randrange(20)}",
        "src",
        f"pkg{rng.randrange(10)}",
        f"mod{rng.randrange(10)}",
        f"sub{rng.randrange(10)}",
        f"leaf{rng.randrange(10)}",
        f"file{i}.py",
    ]
    return "/" + "/".join(parts)


def probe_folder(k: int) -> str:
    """Where probe claim ``k`` lives: deep in the same crowded trees as the filler."""
    return f"/home/u/proj{k % 20}/src/pkg{k % 10}/mod{k % 10}/sub{k % 10}/probe{k}"


def build(n: int, seed: int = 7) -> ClaimTable:
    """PROBES claims at known places, plus ``n - PROBES`` filler claims around them."""
    rng = random.Random(seed)
    table = ClaimTable(ManualClock(0.0, 0.0))
    for k in range(PROBES):
        key = path_key("file", probe_folder(k) + "/held.py")
        table.acquire(f"p{k}", [key])
    for i in range(n - PROBES):
        key = path_key("file", deep_path(rng, i))
        table.acquire(f"s{i % 500}", [key])
    table.drain()
    return table


def queries() -> dict[str, list[Key]]:
    """The same keys for every table size, so the walked depth and the hits are equal."""
    new_file = [path_key("file", f"{probe_folder(i % PROBES)}/new{i}.py") for i in range(CALLS)]
    folder = [path_key("file", probe_folder(i % PROBES)) for i in range(CALLS)]
    exact = [Key("port", str(1 + i % 60_000)) for i in range(CALLS)]
    return {
        "check new file (0 hits, depth 9)": new_file,
        "check folder (1 hit, depth 8)": folder,
        "check port (exact)": exact,
    }


def time_calls(fn: Callable[[], None], calls: int) -> float:
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) / calls / 1000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    tables = {n: build(n) for n in SIZES}
    qs = queries()
    gc.collect()
    gc.freeze()
    samples: dict[tuple[str, int], list[float]] = {}
    cycle_keys = [path_key("file", f"/bench/cycle/{i}/x.py") for i in range(CALLS)]
    for _ in range(args.rounds):
        for n, table in tables.items():
            for name, keys in qs.items():
                us = time_calls(lambda t=table, ks=keys: _checks(t, ks), len(keys))
                samples.setdefault((name, n), []).append(us)
            us = time_calls(lambda t=table: _cycles(t, cycle_keys), len(cycle_keys))
            samples.setdefault(("acquire + release", n), []).append(us)
    names = [*qs, "acquire + release"]
    print(
        f"{'median µs per call':34}" + "".join(f"{n:>12,}" for n in SIZES) + "   10k/100  100k/100"
    )
    for name in names:
        med = [statistics.median(samples[(name, n)]) for n in SIZES]
        print(
            f"{name:34}"
            + "".join(f"{m:12.2f}" for m in med)
            + f"{med[1] / med[0]:9.2f}x{med[2] / med[0]:9.2f}x"
        )
    stats = tables[SIZES[-1]].statistics()
    print(f"\n100k table: {stats.claims:,} claims, {stats.path_nodes:,} trie nodes")


def _checks(table: ClaimTable, keys: list[Key]) -> None:
    check = table.check
    for key in keys:
        check((key,), "someone")


def _cycles(table: ClaimTable, keys: list[Key]) -> None:
    for key in keys:
        table.acquire("bench", (key,))
        table.release("bench", (key,))
    table.drain()


if __name__ == "__main__":
    main()
