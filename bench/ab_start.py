"""Before/after of daemon start-up, interleaved: ``python -m bench.ab_start A=TREE B=TREE``.

Each ``LABEL=TREE`` names a source tree (a git worktree or an extracted commit: its
``src`` is put first on ``PYTHONPATH``). One database with ``--sessions`` live
sessions (10,000 by default, as the scale section's restore row) is built once;
every round then measures, on CPU 0 like the scale section:

* D, the minimal anyio daemon (``bench.echo_server``), exec to first answer;
* for each tree: a fresh copy of that database, started and stopped once by the
  tree's own meshd (so the state is what that tree's clean stop leaves, as in the
  scale section, where the big daemon is stopped before its restarts), then
  started again: exec to the first ``mesh.ping`` answer.

It prints medians of wall time and of the process's CPU time up to the first answer
(schedstat, every thread), each as a ratio to D's in the same rounds: CPU time moves
far less with the load of a shared machine than wall time does.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

from bench.common import (
    LAT_CPUS,
    PYTHON,
    ROOT,
    Place,
    Proc,
    cpu_ns,
    median,
    pinned,
    wait_answering,
)
from bench.targets import register_many

MESHD = [PYTHON, "-m", "meshd", "run", "--profile", "bench", "--log-level", "warning"]


def _timed(argv: list[str], env: dict[str, str], sock: str) -> tuple[float, float]:
    """Wall and CPU seconds from exec to the first answer on ``sock``; then stopped."""
    t = time.monotonic()
    proc = Proc(argv, env)
    try:
        answered = wait_answering(sock, proc=proc.p)
        cpu = cpu_ns(proc.p.pid)
    finally:
        proc.stop()
    return answered - t, cpu


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.ab_start", description=__doc__)
    ap.add_argument("trees", nargs="+", metavar="LABEL=TREE")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument(
        "--build-with",
        metavar="LABEL",
        help="build the database with this tree's meshd (default: this checkout's); "
        "the stored format may differ between trees, and a database is read as it was written",
    )
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.trees)
    place = Place()
    load = os.getloadavg()
    try:
        conf = "[defaults]\nsnapshot_interval = 2.0\n"
        env = place.env("template", conf)
        if args.build_with:
            env["PYTHONPATH"] = f"{Path(trees[args.build_with]) / 'src'}{os.pathsep}{ROOT}"
        proc = Proc(MESHD, env)  # this checkout's meshd (or --build-with's) builds the database
        try:
            wait_answering(env["MESH_SOCKET"], proc=proc.p)
            register_many(env["MESH_SOCKET"], [f"big{i}" for i in range(args.sessions)])
        finally:
            proc.stop()
        template = Path(env["MESH_STATE_DIR"])
        wall: dict[str, list[float]] = {k: [] for k in ("D", *trees)}
        cpu: dict[str, list[float]] = {k: [] for k in wall}
        with pinned(LAT_CPUS):
            for r in range(args.rounds + 1):  # round 0 warms the page cache and bytecode
                d_sock = place.sock(f"d{r}")
                echo = [PYTHON, "-m", "bench.echo_server", d_sock]
                w, c = _timed(echo, place.child_env(), d_sock)
                Path(d_sock).unlink(missing_ok=True)
                if r:
                    wall["D"].append(w)
                    cpu["D"].append(c)
                for label, tree in trees.items():
                    tenv = place.env(label, conf)
                    tenv["PYTHONPATH"] = f"{Path(tree) / 'src'}{os.pathsep}{ROOT}"
                    state = Path(tenv["MESH_STATE_DIR"])
                    shutil.rmtree(state)
                    shutil.copytree(template, state)
                    _timed(MESHD, tenv, tenv["MESH_SOCKET"])  # its own clean stop
                    w, c = _timed(MESHD, tenv, tenv["MESH_SOCKET"])
                    if r:
                        wall[label].append(w)
                        cpu[label].append(c)
        dw, dc = median(wall["D"]), median(cpu["D"])
        built = f", database built by {args.build_with}" if args.build_with else ""
        print(f"{args.rounds} rounds, {args.sessions:,} sessions to restore{built}, CPU 0")
        print(f"load average {load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
        for label, walls in wall.items():
            w, c = median(walls), median(cpu[label])
            print(
                f"{label:>10}  wall {w * 1e3:7.1f} ms  {w / dw:5.2f}x D"
                f"   CPU {c * 1e3:7.1f} ms  {c / dc:5.2f}x D"
            )
    finally:
        place.cleanup()


if __name__ == "__main__":
    main()
