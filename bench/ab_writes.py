"""Before/after of the durable write path, interleaved: ``python -m bench.ab_writes A=path B=path``.

Each ``LABEL=TREE`` names a source tree (a git worktree: its ``src`` is put first on
``PYTHONPATH``); every tree gets its own meshd and its own no-group-commit meshd, and
the rounds alternate between trees, so load on this shared machine falls on both
sides alike. Per round and tree it measures what BENCH.md's durable-write rows target:

* durable writes/s at 100 writers (register, end, ...), group commit on and off, and
  the daemon's CPU per write;
* one connection's durable round trip p50 (register or end) and a claim or release
  round trip p50, client and daemon on one CPU, and the claim's again unpinned (the
  scheduler's choice of CPUs, as a user's processes run);
* 100 clients on heartbeats: requests/s and p99;

and the floors E (echo round trip p50, echo rate at 100) and W1 once per round. It
prints medians per tree and the ratios the targets use.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from bench import floors, load
from bench.common import (
    CLIENT_CPUS,
    LAT_CPUS,
    PYTHON,
    ROOT,
    SERVER_CPUS,
    LineClient,
    Place,
    Proc,
    all_cpus,
    cpu_ns,
    median,
    pct,
    pin,
    pinned,
    rpc,
    start_echo,
    time_roundtrips,
    wait_answering,
)
from bench.targets import SESSION, end_many, register_many


def start(
    place: Place, name: str, tree: Path, nogc: bool, config_text: str | None = None
) -> tuple[Proc, str]:
    env = place.env(name, config_text)
    env["PYTHONPATH"] = f"{tree / 'src'}:{ROOT}"
    argv = [PYTHON, "-m", "bench.meshd_variant"]
    if nogc:
        argv.append("--no-group-commit")
    argv += ["run", "--profile", "bench", "--log-level", "warning"]
    proc = Proc(argv, env, place.root / f"{name}.log")
    wait_answering(env["MESH_SOCKET"], proc=proc.p)
    return proc, env["MESH_SOCKET"]


def trees_of(argv: list[str]) -> dict[str, Path]:
    """``LABEL=TREE`` arguments: each label's source tree, resolved."""
    return {label: Path(tree).resolve() for label, tree in (a.split("=", 1) for a in argv)}


def main(argv: list[str]) -> None:
    rounds = int(os.environ.get("AB_ROUNDS", "5"))
    dur = float(os.environ.get("AB_DUR", "2"))
    lat_n = int(os.environ.get("AB_LAT", "1000"))
    trees = trees_of(argv)
    place = Place()
    echo, echo_path = start_echo(place)
    procs: dict[str, tuple[Proc, str, Proc, str]] = {}
    out: dict[tuple[str, str], list[float]] = {}

    def rec(label: str, key: str, value: float) -> None:
        out.setdefault((label, key), []).append(value)

    try:
        for label, tree in trees.items():
            gp, gs = start(place, f"{label}-gc", tree, False)
            np_, ns = start(place, f"{label}-nogc", tree, True)
            procs[label] = (gp, gs, np_, ns)
            register_many(gs, [f"hb{i}" for i in range(100)])
        writers = [
            [
                rpc("session.register", {**SESSION, "session_id": f"w{i}"}),
                rpc("session.end", {"session_id": f"w{i}"}),
            ]
            for i in range(100)
        ]
        beats = [[rpc("session.heartbeat", {"session_id": f"hb{i}"})] for i in range(100)]
        for r in range(rounds):
            e = LineClient(echo_path)
            with pinned(LAT_CPUS, echo.pid):
                rec("floor", "E", pct(time_roundtrips(e, rpc("mesh.ping"), lat_n), 0.5))
            e.close()
            with pinned(LAT_CPUS):
                rec("floor", "W1", floors.w1(place.root / f"w1-{r}.sqlite3", 1000))
            pin(echo.pid, SERVER_CPUS)
            pin(0, CLIENT_CPUS)
            er = load.drive(echo_path, beats, dur)
            rec("floor", "E@100", er.rate)
            rec("floor", "E p99@100", er.p99)
            pin(echo.pid, all_cpus())
            for label, (gp, gs, np_, ns) in procs.items():
                for name, proc, path in (("gc", gp, gs), ("nogc", np_, ns)):
                    pin(proc.pid, SERVER_CPUS)
                    c0 = cpu_ns(proc.pid)
                    res = load.drive(path, writers, dur)
                    rec(label, f"durable@100 {name}", res.rate)
                    rec(label, f"cpu/write {name}", (cpu_ns(proc.pid) - c0) / max(1, res.requests))
                    pin(proc.pid, all_cpus())
                pin(gp.pid, SERVER_CPUS)
                res = load.drive(gs, beats, dur)
                pin(gp.pid, all_cpus())
                rec(label, "hb@100", res.rate)
                rec(label, "hb p99@100", res.p99)
                pin(0, all_cpus())
                c = LineClient(gs)
                with pinned(LAT_CPUS, gp.pid):
                    pair = [
                        rpc("session.register", {**SESSION, "session_id": "lat"}),
                        rpc("session.end", {"session_id": "lat"}),
                    ]
                    rt: list[float] = []
                    for _ in range(lat_n // 2):
                        rt += time_roundtrips(c, pair[0], 1)
                        rt += time_roundtrips(c, pair[1], 1)
                    rec(label, "durable rt p50", pct(rt, 0.5))
                    c.roundtrip(rpc("session.register", {**SESSION, "session_id": "me"}))
                    ct: list[float] = []
                    for k in range(lat_n // 2):
                        res_ = {"session_id": "me", "resources": [f"file:/bench/ab/r{r}/f{k}"]}
                        ct += time_roundtrips(c, rpc("claim.acquire", res_), 1)
                        ct += time_roundtrips(c, rpc("claim.release", res_), 1)
                    rec(label, "claim rt p50", pct(ct, 0.5))
                ct = []  # the same unpinned, as a user's processes run
                for k in range(lat_n // 2):
                    res_ = {"session_id": "me", "resources": [f"file:/bench/ab/u{r}/f{k}"]}
                    ct += time_roundtrips(c, rpc("claim.acquire", res_), 1)
                    ct += time_roundtrips(c, rpc("claim.release", res_), 1)
                rec(label, "claim rt p50 unpinned", pct(ct, 0.5))
                c.roundtrip(rpc("session.end", {"session_id": "me"}))
                c.close()
            pin(0, all_cpus())
            print(f"round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    finally:
        for gp, gs, np_, _ns in procs.values():
            end_many(gs, [f"hb{i}" for i in range(100)])
            gp.stop()
            np_.stop()
        echo.stop()
        place.cleanup()
    report(out, list(trees))


def report(out: dict[tuple[str, str], list[float]], labels: list[str]) -> None:
    m: dict[tuple[str, str], float] = {k: median(v) for k, v in out.items()}
    e, w1, e100 = m["floor", "E"], m["floor", "W1"], m["floor", "E@100"]
    print(f"floors: E p50 {e * 1e6:.1f} us, W1 {w1 * 1e6:.1f} us, E@100 {e100 / 1e3:.1f}k/s")
    rows: list[tuple[str, Any]] = []
    for label in labels:

        def g(k: str, label: str = label) -> float:
            return m[label, k]

        rows.append(
            (
                label,
                {
                    "durable@100 gc": f"{g('durable@100 gc') / 1e3:.1f}k/s",
                    "durable@100 nogc": f"{g('durable@100 nogc') / 1e3:.1f}k/s",
                    "gc/nogc": f"{g('durable@100 gc') / g('durable@100 nogc'):.2f}x",
                    "cpu/write gc": f"{g('cpu/write gc') * 1e6:.1f} us",
                    "cpu/write nogc": f"{g('cpu/write nogc') * 1e6:.1f} us",
                    "durable/hb": f"{g('durable@100 gc') / g('hb@100'):.2f}x",
                    "durable rt p50": f"{g('durable rt p50') * 1e6:.1f} us "
                    f"({g('durable rt p50') / (e + w1):.2f}x E+W1)",
                    "claim rt p50": f"{g('claim rt p50') * 1e6:.1f} us "
                    f"({g('claim rt p50') / (e + w1):.2f}x E+W1)",
                    "claim rt p50 unpinned": f"{g('claim rt p50 unpinned') * 1e6:.1f} us "
                    f"({g('claim rt p50 unpinned') / g('claim rt p50'):.2f}x pinned)",
                    "hb@100": f"{g('hb@100') / 1e3:.1f}k/s ({g('hb@100') / e100:.2f}x E@100)",
                    "hb p99@100": f"{g('hb p99@100') * 1e3:.2f} ms "
                    f"({g('hb p99@100') / m['floor', 'E p99@100']:.2f}x E)",
                },
            )
        )
    keys = list(rows[0][1])
    print("| measure | " + " | ".join(label for label, _ in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for k in keys:
        print(f"| {k} | " + " | ".join(r[k] for _, r in rows) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
