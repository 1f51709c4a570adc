"""The waiter storm, A/B: ``python -m bench.storm_ab --base SRC [--also SRC] [--rounds N]``.

Daemons side by side, each measured as ``python -m bench --only waiters`` measures
one: A runs the ``meshd`` package found under ``SRC`` (a checkout's ``src`` folder,
e.g. an export of main), B this tree's, C… those of ``--also``. Rounds rotate which
goes first; each round measures, for each daemon, the prober's ping p99 on the idle
daemon, then during a storm of ``n`` waiters, and the storm's enqueue and cancel (wall
and daemon CPU). The figure that counts is each round's storm/idle ratio; the medians
of those are printed per side. Used for the before/after in docs/PERFORMANCE.md.
``--quiet 0.9`` waits for a quiet second of the machine before each side's turn.
``--boost`` (root, Linux) emulates a quiet machine on a shared one: the run takes a
scheduler autogroup of its own at nice -20 (other sessions' autogroups then get
little of the CPU while it wants it; plain ``nice`` works only within an autogroup),
and the prober runs at nice -10 within it, so that it measures the daemon, not the
driver it shares a CPU with. Both sides get the same treatment.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from pathlib import Path

from bench.common import (
    CLIENT_CPUS,
    SERVER_CPUS,
    Place,
    Proc,
    all_cpus,
    median,
    pct,
    pin,
    raise_nofile,
    wait_answering,
)
from bench.waiters import Prober, storm


def _start(place: Place, name: str, src: str | None) -> tuple[Proc, str]:
    env = place.env(name)
    if src is not None:
        env["PYTHONPATH"] = f"{src}:{env['PYTHONPATH']}"
    argv = [
        __import__("sys").executable, "-m", "meshd", "run", "--profile", "bench",
        "--log-level", "warning",
    ]  # fmt: skip
    proc = Proc(argv, env, place.root / f"{name}.log")
    wait_answering(env["MESH_SOCKET"], proc=proc.p)
    return proc, env["MESH_SOCKET"]


def _idle_share(seconds: float = 1.0) -> float:
    """The share of all CPUs' time that was idle over the next ``seconds`` (/proc/stat)."""

    def read() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait, all

    i0, t0 = read()
    time.sleep(seconds)
    i1, t1 = read()
    return (i1 - i0) / max(1, t1 - t0)


def _wait_quiet(share: float, patience: float) -> float:
    """Wait until a second of the machine is at least ``share`` idle, for at most
    ``patience`` seconds: the quiet-machine ratio is the one the target means, and
    other processes' load inflates the idle p99 it is divided by. The share seen last."""
    deadline = time.monotonic() + patience
    while True:
        seen = _idle_share()
        if seen >= share or time.monotonic() > deadline:
            return seen


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.storm_ab", description=__doc__)
    ap.add_argument("--base", required=True, help="src folder of the baseline (A)")
    ap.add_argument("--also", action="append", default=[], help="src folder of a side C, D, …")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument(
        "--quiet", type=float, default=0.0, metavar="SHARE",
        help="before each side's turn, wait (up to --patience s) until a second of the "
        "machine is this share idle (0.9: 90 %%); each round line says what it was",
    )  # fmt: skip
    ap.add_argument("--patience", type=float, default=120.0)
    ap.add_argument("--boost", action="store_true", help="see the module's docstring")
    args = ap.parse_args()
    if args.boost:
        _boost()
    raise_nofile(4096)
    place = Place()
    sides = {"A": _start(place, "a", str(Path(args.base).resolve())), "B": _start(place, "b", None)}
    for i, src in enumerate(args.also):
        name = chr(ord("C") + i)
        sides[name] = _start(place, name.lower(), str(Path(src).resolve()))
    got: dict[str, dict[str, list[float]]] = {k: {} for k in sides}
    try:
        pin(0, CLIENT_CPUS)
        for proc, path in sides.values():
            pin(proc.pid, SERVER_CPUS)
            storm(path, args.n // 10, "warm")
        for r in range(args.rounds):
            order = list(sides)[r % len(sides) :] + list(sides)[: r % len(sides)]
            for side in order:
                proc, path = sides[side]
                quiet = _wait_quiet(args.quiet, args.patience) if args.quiet else None
                with Prober(path) as idle:
                    time.sleep(1.0)
                marks: dict[str, float] = {}

                def mark(phase: str, marks: dict[str, float] = marks) -> None:
                    marks[phase] = time.perf_counter()

                with Prober(path) as busy:
                    figures = storm(path, args.n, f"r{r}", proc.pid, mark=mark)
                g = got[side]
                phases = {
                    phase: [x for t, x in busy.samples if marks[t0] <= t < marks[t1]]
                    for phase, t0, t1 in (
                        ("enqueue", "registered", "enqueue"), ("cancel", "enqueue", "cancel"),
                    )
                }  # fmt: skip
                for phase, xs in phases.items():
                    if xs:
                        g.setdefault(f"{phase} p50", []).append(pct(xs, 0.5))
                        g.setdefault(f"{phase} p99", []).append(pct(xs, 0.99))
                i99, s99 = pct(idle.times, 0.99), pct(busy.times, 0.99)
                worst = max(busy.times)
                for k, v in zip(
                    ("idle p99", "storm p99", "ratio", "worst", "enqueue", "cancel",
                     "enqueue cpu", "cancel cpu"),
                    (i99, s99, s99 / i99, worst, *figures),
                    strict=True,
                ):  # fmt: skip
                    g.setdefault(k, []).append(v)
                print(
                    f"round {r} {side}: idle p99 {i99 * 1e3:.2f} ms, storm p99 {s99 * 1e3:.2f} ms"
                    f" ({s99 / i99:.2f}x), worst {worst * 1e3:.0f} ms,"
                    f" enqueue {figures[0]:.2f} s (cpu {figures[2]:.2f} s),"
                    f" cancel {figures[1]:.2f} s (cpu {figures[3]:.2f} s)"
                    + "".join(
                        f", {ph} p50/p99 {pct(xs, 0.5) * 1e3:.2f}/{pct(xs, 0.99) * 1e3:.2f} ms"
                        for ph, xs in phases.items()
                        if xs
                    )
                    + ("" if quiet is None else f", machine {quiet:.0%} idle before"),
                    flush=True,
                )
    finally:
        pin(0, all_cpus())
        for proc, _path in sides.values():
            proc.stop()
        print(f"logs kept in {place.root}")
    for side, g in got.items():
        m = {k: median(v) for k, v in g.items()}
        print(
            f"{side} medians: idle p99 {m['idle p99'] * 1e3:.2f} ms, storm p99 "
            f"{m['storm p99'] * 1e3:.2f} ms, ratio {m['ratio']:.2f}x (rounds: "
            f"{', '.join(f'{x:.2f}' for x in g['ratio'])}), worst ping {m['worst'] * 1e3:.0f} ms, "
            f"enqueue {m['enqueue']:.2f} s "
            f"cpu {m['enqueue cpu']:.2f} s, cancel {m['cancel']:.2f} s cpu {m['cancel cpu']:.2f} s"
            + "".join(
                f", {ph} p50/p99 {m[ph + ' p50'] * 1e3:.2f}/{m[ph + ' p99'] * 1e3:.2f} ms"
                for ph in ("enqueue", "cancel")
                if ph + " p50" in m
            )
        )


def _boost() -> None:
    """A scheduler autogroup of its own at nice -20, and a prober at nice -10 in it."""
    with contextlib.suppress(PermissionError):  # already a session leader: boost its own
        os.setsid()  # a new session is a new autogroup
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write("-20")
    except OSError as exc:
        raise SystemExit(f"--boost needs root on Linux with autogroups: {exc}") from exc
    os.environ["BENCH_PROBER_NICE"] = "-10"


if __name__ == "__main__":
    main()
