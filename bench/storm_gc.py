"""The waiter storm's garbage collections, A/B: ``python -m bench.storm_gc --base SRC``.

Each daemon (A: the ``meshd`` under ``SRC``, e.g. an export of main's ``src``; B: this
tree's) runs under a launcher that counts its cyclic collections with
``gc.callbacks``: how many of each generation, their total and longest time. The
counts are read at the phase boundaries of the storm of ``python -m bench --only
waiters`` (``n`` waiters queued on one key by 100 pipelining connections, then the
connections closed): enqueue, cancel. Rounds alternate which daemon goes first;
medians per side. What the counts show does not depend on the machine's load (the
times do): how often the collector runs, and how long a full collection walks.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import (
    CLIENT_CPUS,
    SERVER_CPUS,
    Place,
    Proc,
    all_cpus,
    median,
    pin,
    raise_nofile,
    wait_answering,
)
from bench.waiters import storm

# meshd in this process; SIGUSR1 appends the collections counted since the last one
# (per generation: count, total seconds, longest) to the file named first, and resets.
_LAUNCHER = """
import gc, json, runpy, signal, sys, time
out = sys.argv.pop(1)
stats = [[0, 0.0, 0.0] for _ in range(3)]
started = [0.0]
def count(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        s = stats[info["generation"]]
        took = time.perf_counter() - started[0]
        s[0] += 1; s[1] += took; s[2] = max(s[2], took)
gc.callbacks.append(count)
def dump(*_):
    line = json.dumps(stats) + "\\n"
    for s in stats:
        s[:] = [0, 0.0, 0.0]
    with open(out, "a") as f:
        f.write(line)
signal.signal(signal.SIGUSR1, dump)
sys.argv[0] = "meshd"
runpy.run_module("meshd", run_name="__main__", alter_sys=True)
"""


class Counted:
    """A daemon under the counting launcher."""

    def __init__(self, place: Place, name: str, src: str | None) -> None:
        env = place.env(name)
        if src is not None:
            env["PYTHONPATH"] = f"{src}:{env['PYTHONPATH']}"
        self.out = place.root / f"{name}.gc"
        argv = [
            sys.executable, "-c", _LAUNCHER, str(self.out), "run", "--profile", "bench",
            "--log-level", "warning",
        ]  # fmt: skip
        self.proc = Proc(argv, env, place.root / f"{name}.log")
        self.path = env["MESH_SOCKET"]
        wait_answering(self.path, proc=self.proc.p)

    def read(self) -> list[list[float]]:
        """The collections since the last read (SIGUSR1, then wait for its line)."""
        lines = self.out.read_text().count("\n") if self.out.exists() else 0
        os.kill(self.proc.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = self.out.read_text() if self.out.exists() else ""
            if text.count("\n") > lines:
                got: list[list[float]] = json.loads(text.splitlines()[lines])
                return got
            time.sleep(0.01)
        raise RuntimeError("the daemon did not report its collections")


def _show(side: str, phase: str, rows: list[list[list[float]]]) -> str:
    parts = []
    for gen in range(3):
        n = median([r[gen][0] for r in rows])
        total = median([r[gen][1] for r in rows]) * 1e3
        worst = median([r[gen][2] for r in rows]) * 1e3
        parts.append(f"gen{gen} {n:.0f} x, {total:.0f} ms (longest {worst:.1f} ms)")
    return f"{side} {phase}: " + "; ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.storm_gc", description=__doc__)
    ap.add_argument("--base", required=True, help="src folder of the baseline (A)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=10_000)
    args = ap.parse_args()
    raise_nofile(4096)
    place = Place()
    base = str(Path(args.base).resolve())
    sides = {"A": Counted(place, "a", base), "B": Counted(place, "b", None)}
    got: dict[str, dict[str, list[Any]]] = {k: {"enqueue": [], "cancel": []} for k in sides}
    try:
        pin(0, CLIENT_CPUS)
        for d in sides.values():
            pin(d.proc.pid, SERVER_CPUS)
            storm(d.path, args.n // 10, "warm")
        for r in range(args.rounds):
            order = list(sides)[r % 2 :] + list(sides)[: r % 2]
            for side in order:
                d = sides[side]
                d.read()  # start counting here
                marks: dict[str, Any] = {}

                def mark(phase: str, d: Counted = d, marks: dict[str, Any] = marks) -> None:
                    marks[phase] = d.read()

                storm(d.path, args.n, f"r{r}", mark=mark)
                for phase in ("enqueue", "cancel"):
                    got[side][phase].append(marks[phase])
                    print(f"round {r} " + _show(side, phase, [marks[phase]]), flush=True)
    finally:
        pin(0, all_cpus())
        for d in sides.values():
            d.proc.stop()
        print(f"logs kept in {place.root}; load average {os.getloadavg()}")
    for side, phases in got.items():
        for phase, rows in phases.items():
            print("median " + _show(side, phase, rows))


if __name__ == "__main__":
    main()
