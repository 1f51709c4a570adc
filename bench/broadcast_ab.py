"""A broadcast's fan-out before/after, interleaved: ``python -m bench.broadcast_ab A=dir B=dir``.

Each ``LABEL=TREE`` names a source tree (a git worktree: its ``src`` is put first on
``PYTHONPATH``). Every tree gets its own meshd with ``AB_N`` (1,000) sessions, each
subscribed on a connection of its own, as in the full bench's broadcast row
(``bench/claims.py``). Rounds alternate between the floor (the echo server writing
one line to each of ``AB_N`` connections) and each tree's ``broadcast.send``, timed
until the last subscriber has its line, so load on this shared machine falls on all
sides alike. Also the daemon's CPU per broadcast (every thread, schedstat). Prints
medians per tree and the ratio the target uses (≤ 2x fan-out).

``AB_ROUNDS`` (default 9) rounds of ``AB_EACH`` (default 3) broadcasts per tree.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from bench import load
from bench.ab_writes import start, trees_of
from bench.claims import BROADCAST, _fanout, subscribe_all
from bench.common import (
    LAT_CPUS,
    Place,
    Proc,
    cpu_ns,
    median,
    pinned,
    rpc,
    start_echo,
)

#: One caster sends every broadcast: more than the default 30 a minute.
CONFIG = "[defaults]\nmessage_budget_per_minute = 100000\n"


def main(argv: list[str]) -> None:
    rounds = int(os.environ.get("AB_ROUNDS", "9"))
    each = int(os.environ.get("AB_EACH", "3"))
    n = int(os.environ.get("AB_N", "1000"))
    trees = trees_of(argv)
    place = Place()
    echo, echo_path = start_echo(place)
    ids = [f"sub{i}" for i in range(n)]
    frame = rpc(BROADCAST, {"session_id": "caster", "text": "heads up: rebasing main"})
    fan = rpc("fanout")
    daemons: dict[str, tuple[Proc, str, list[Any]]] = {}
    out: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    echo_subs: list[Any] = []
    try:
        for label, tree in trees.items():
            proc, path = start(place, label, tree, False, CONFIG)
            daemons[label] = (proc, path, subscribe_all(path, ids))
        echo_subs = load.connect_all(echo_path, n)
        labels = list(daemons)
        for r in range(rounds):
            order = labels if r % 2 == 0 else labels[::-1]
            with pinned(LAT_CPUS, echo.pid, *(d[0].pid for d in daemons.values())):
                c0 = cpu_ns(echo.pid)
                floor = [t for _ in range(each) for t in _fanout(echo_path, echo_subs, fan, 1)]
                cpu.setdefault("floor", []).append((cpu_ns(echo.pid) - c0) / each)
                out.setdefault("floor", []).extend(floor)
                for label in order:
                    proc, path, subs = daemons[label]
                    c0 = cpu_ns(proc.pid)
                    times = [t for _ in range(each) for t in _fanout(path, subs, frame, 1)]
                    # the daemon's CPU includes the 0.2 s drain pause: idle, so ~0
                    cpu.setdefault(label, []).append((cpu_ns(proc.pid) - c0) / each)
                    out.setdefault(label, []).extend(times)
            print(f"round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    except BaseException:
        for label in daemons:  # what the daemons said, before their folder goes
            log = place.root / f"{label}.log"
            print(f"--- {label}'s log:", log.read_text()[-3000:] if log.exists() else "")
        raise
    finally:
        for s in echo_subs:
            s.close()
        for proc, _path, subs in daemons.values():
            for s in subs:
                s.close()
            proc.stop()
        echo.stop()
        place.cleanup()
    floor = median(out["floor"])
    print(
        f"floor: echo fan-out to {n:,} p50 {floor * 1e3:.2f} ms, echo CPU "
        f"{median(cpu['floor']) * 1e3:.2f} ms ({len(out['floor'])} runs)"
    )
    print("| tree | broadcast p50 | x fan-out | daemon CPU per broadcast | runs |")
    print("|---|---|---|---|---|")
    for label in trees:
        t = median(out[label])
        print(
            f"| {label} | {t * 1e3:.2f} ms | {t / floor:.2f}x | "
            f"{median(cpu[label]) * 1e3:.2f} ms | {len(out[label])} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
