"""The read paths of two source trees in one interleaved run.

``python -m bench.reads_ab BEFORE [AFTER] [--rounds N]``: BEFORE and AFTER are
checkouts (their ``src`` goes first on ``PYTHONPATH``; AFTER defaults to this tree).
Starts the echo floor and one meshd per tree, sets each up alike (10 live sessions,
100 holders x 100 claims 8 levels deep, a live responder: ``bench/responder.py``),
then measures round by round, each tree in turn, everything pinned to one CPU:
``session.list`` of 10 sessions raw and through ``Mesh.call`` (the tree's own client,
in a worker process), ``claim.check`` of a free path beside the 10,000 claims,
``query.ask`` answered by the responder, and E (the echo round trip) every round;
in the claims phase also E3, the echo server relaying the same ask to the same
responder script (the least an ask through a third process takes; ``echo_server``).
Prints medians over the rounds of each round's p50, and each as a ratio to E.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import claims as bc
from bench.common import (
    LAT_CPUS,
    PYTHON,
    ROOT,
    LineClient,
    Place,
    Proc,
    cpu_ns,
    median,
    pct,
    pinned,
    rpc,
    start_echo,
    time_roundtrips,
    wait_answering,
)

ASKERS = 400  # an asker may ask 30 times a minute (the message budget)


class Variant:
    """One tree's daemon, its raw client, its library worker and its responder."""

    def __init__(self, place: Place, name: str, tree: Path) -> None:
        from bench.targets import register_many

        self.name = name
        env = place.env(name)
        env["PYTHONPATH"] = f"{tree / 'src'}:{ROOT}"
        self.sock = env["MESH_SOCKET"]
        self.meshd = Proc(
            [PYTHON, "-m", "meshd", "run", "--profile", "bench", "--log-level", "warning"],
            env,
            place.root / f"{name}.log",
        )
        wait_answering(self.sock, proc=self.meshd.p)
        register_many(self.sock, [f"live{i}" for i in range(10)])
        self.c = LineClient(self.sock, timeout=60)
        self.env = env
        self.askers = [f"asker{i}" for i in range(ASKERS)]
        self.worker = subprocess.Popen(
            [PYTHON, "-m", "bench.reads_ab", "--worker", self.sock],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, text=True,
        )  # fmt: skip
        self.asked = 0
        self.pids = [self.meshd.pid, self.worker.pid]

    def fill(self) -> None:
        """The claims phase: 100 holders x 100 claims, askers, a live responder."""
        from bench.targets import pipeline, register_many

        holders = [f"holder{i}" for i in range(100)]
        register_many(self.sock, ["responder", *holders, *self.askers])
        frames = [bc.acquire(h, [bc.deep(i, j)]) for i, h in enumerate(holders) for j in range(100)]
        if any("error" in r for r in pipeline(self.c, frames)):
            raise RuntimeError(f"{self.name}: a claim failed")
        self.responder = subprocess.Popen(
            [PYTHON, "-m", "bench.responder", self.sock, "responder"], env=self.env, cwd=ROOT
        )
        self.pids.append(self.responder.pid)
        self.mesh_list("respond")

    def mesh_list(self, n: int | str) -> list[float]:
        assert self.worker.stdin is not None
        assert self.worker.stdout is not None
        self.worker.stdin.write(f"{n}\n")
        self.worker.stdin.flush()
        return [float(t) for t in json.loads(self.worker.stdout.readline())]

    def ask(self, n: int, to: str = "responder") -> list[float]:
        out = []
        for _ in range(n):
            sid = self.askers[self.asked % ASKERS]
            self.asked += 1
            frame = rpc(bc.ASK, {"session_id": sid, "to": to,
                                 "question": "what are you doing?", "timeout": 5})  # fmt: skip
            t = time.perf_counter()
            reply = json.loads(self.c.roundtrip(frame))
            out.append(time.perf_counter() - t)
            if reply.get("result", {}).get("answered_by") != "session":
                raise RuntimeError(f"{self.name}: ask not answered by the responder: {reply}")
        return out

    def stop(self) -> None:
        for p in (self.worker, getattr(self, "responder", None)):
            if p is None:
                continue
            p.terminate()
            p.wait()
        self.c.close()
        self.meshd.stop()


def relayed(e: LineClient, n: int) -> list[float]:
    """``n`` asks relayed by the echo server to its responder (floor E3)."""
    frame = rpc(bc.ASK, {"session_id": "asker", "to": "responder",
                         "question": "what are you doing?", "timeout": 5})  # fmt: skip
    out = []
    for _ in range(n):
        t = time.perf_counter()
        reply = json.loads(e.roundtrip(frame))
        out.append(time.perf_counter() - t)
        if reply.get("result", {}).get("answered_by") != "session":
            raise RuntimeError(f"echo relay: not answered by the responder: {reply}")
    return out


def worker(sock: str) -> None:
    """Time ``Mesh.call("session.list")`` n times per line read; print the times."""
    from meshctl import Mesh

    mesh = Mesh("bench", socket=sock, autostart=False)
    clock = time.perf_counter
    for line in sys.stdin:
        if line.strip() == "respond":  # the library's live responder, on its own thread
            sess = mesh.session(session_id="libresponder", heartbeat_interval=3600)
            sess.start()
            sess.on_query(lambda q: "ok")
            print("[]", flush=True)
            continue
        out = []
        for _ in range(int(line)):
            t = clock()
            mesh.call("session.list")
            out.append(clock() - t)
        print(json.dumps(out), flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.reads_ab", description=__doc__)
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path, nargs="?", default=ROOT)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("-n", type=int, default=400, help="round trips per row and round")
    args = ap.parse_args(argv)
    place = Place()
    echo, echo_path = start_echo(place)
    variants = [Variant(place, "before", args.before), Variant(place, "after", args.after)]
    e = LineClient(echo_path)
    hb = rpc("session.heartbeat", {"session_id": "live0"})
    lst = rpc("session.list")
    probe = bc.check("live0", [bc.deep(50, 50).replace("file50.py", "other.py")])
    acc: dict[str, list[float]] = {}

    def keep(key: str, times: list[float]) -> None:
        acc.setdefault(key, []).append(pct(times, 0.5))

    def decode(v: Variant, k: int) -> list[float]:
        """What the blocking client's decode of one listing costs (stdlib json)."""
        line, out, clock = v.c.roundtrip(lst).decode(), [], time.perf_counter
        for _ in range(k):
            t = clock()
            json.loads(line)
            out.append(clock() - t)
        return out

    def timed(v: Variant, row: str, fn: Callable[[], list[float]], other: int = 0) -> None:
        """The row's round trips, and the daemon's CPU per request meanwhile (and that
        of process ``other``: the responder, for the ask)."""
        cpu, cpu_other = cpu_ns(v.meshd.pid), cpu_ns(other) if other else 0.0
        times = fn()
        acc.setdefault(f"{v.name} {row} cpu", []).append((cpu_ns(v.meshd.pid) - cpu) / len(times))
        if other:
            used = (cpu_ns(other) - cpu_other) / len(times)
            acc.setdefault(f"{v.name} {row} other cpu", []).append(used)
        keep(f"{v.name} {row}", times)

    n = args.n
    echo_responder: subprocess.Popen[bytes] | None = None
    try:
        for phase in ("sessions", "claims"):
            extra = []
            if phase == "claims":
                for v in variants:
                    v.fill()
                echo_responder = subprocess.Popen(
                    [PYTHON, "-m", "bench.responder", echo_path, "responder"],
                    env=variants[-1].env, cwd=ROOT,
                )  # fmt: skip
                extra.append(echo_responder.pid)
                time.sleep(0.5)  # the responders subscribe
            pids = [echo.pid, *extra, *(p for v in variants for p in v.pids)]
            with pinned(LAT_CPUS, *pids):
                for r in range(args.rounds):
                    keep(f"E {phase}", time_roundtrips(e, hb, n))
                    if phase == "claims":
                        assert echo_responder is not None
                        c0, r0 = cpu_ns(echo.pid), cpu_ns(echo_responder.pid)
                        keep("E3", relayed(e, n // 8))
                        acc.setdefault("E3 cpu", []).append((cpu_ns(echo.pid) - c0) / (n // 8))
                        used = (cpu_ns(echo_responder.pid) - r0) / (n // 8)
                        acc.setdefault("E3 responder cpu", []).append(used)
                    for v in variants if r % 2 else variants[::-1]:
                        if phase == "sessions":
                            timed(v, "list raw", lambda v=v: time_roundtrips(v.c, lst, n // 4))
                            timed(v, "list Mesh.call", lambda v=v: v.mesh_list(n // 4))
                            timed(v, "heartbeat raw", lambda v=v: time_roundtrips(v.c, hb, n))
                            keep(f"{v.name} list: json.loads of the reply", decode(v, n // 4))
                        else:
                            timed(v, "claim.check", lambda v=v: time_roundtrips(v.c, probe, n))
                            timed(v, "ask", lambda v=v: v.ask(n // 8), v.responder.pid)
                            timed(v, "ask, library responder",
                                  lambda v=v: v.ask(n // 8, "libresponder"))  # fmt: skip
                    print(f"{phase} round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
    finally:
        if echo_responder is not None:
            echo_responder.terminate()
            echo_responder.wait()
        for v in variants:
            v.stop()
        e.close()
        echo.stop()
        place.cleanup()
    report(acc, args)


def report(acc: dict[str, list[float]], args: Any) -> None:
    print(f"\nreads_ab: {args.rounds} rounds, n={args.n}; medians of per-round p50s")
    print("| row | before | after | after/before |\n|---|---|---|---|")
    rows = {"sessions": ("list raw", "list Mesh.call", "heartbeat raw"),
            "claims": ("claim.check", "ask", "ask, library responder")}  # fmt: skip
    for phase, names in rows.items():
        e = median(acc[f"E {phase}"])
        print(f"| E ({phase} phase) | {e * 1e6:.1f} µs | | |")
        if phase == "claims":
            e3 = median(acc["E3"])
            print(f"| E3: the echo server relaying the ask (floor) | {e3 * 1e6:.1f} µs "
                  f"({e3 / e:.2f}x E) | | |")  # fmt: skip
            srv, resp = median(acc["E3 cpu"]), median(acc["E3 responder cpu"])
            print(f"| E3: server CPU, responder CPU per ask | {srv * 1e6:.1f} µs, "
                  f"{resp * 1e6:.1f} µs | | |")  # fmt: skip
        for row in names:
            _row(acc, row, e)
        if phase == "sessions":  # the client's share of "list Mesh.call"
            b, a = (median(acc[f"{w} list: json.loads of the reply"]) for w in ("before", "after"))
            print(f"| list: json.loads of the reply | {b * 1e6:.1f} µs ({b / e:.2f}x E) "
                  f"| {a * 1e6:.1f} µs ({a / e:.2f}x E) | {a / b:.2f}x |")  # fmt: skip


def _row(acc: dict[str, list[float]], row: str, e: float) -> None:
    b, a = median(acc[f"before {row}"]), median(acc[f"after {row}"])
    print(
        f"| {row} p50 | {b * 1e6:.1f} µs ({b / e:.2f}x E) | {a * 1e6:.1f} µs ({a / e:.2f}x E) "
        f"| {a / b:.2f}x |"
    )
    if row.startswith("ask"):
        e3 = median(acc["E3"])
        print(f"| {row}, to E3 | {b / e3:.2f}x E3 | {a / e3:.2f}x E3 | |")
    b, a = median(acc[f"before {row} cpu"]), median(acc[f"after {row} cpu"])
    print(f"| {row}: daemon CPU | {b * 1e6:.1f} µs | {a * 1e6:.1f} µs | {a / b:.2f}x |")
    if f"after {row} other cpu" in acc:
        b, a = median(acc[f"before {row} other cpu"]), median(acc[f"after {row} other cpu"])
        print(f"| {row}: responder CPU | {b * 1e6:.1f} µs | {a * 1e6:.1f} µs | {a / b:.2f}x |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2])
    else:
        main()
