"""Fleet claim + release, daemons A and B against floor K2, interleaved in one run.

``python -m bench.fleet_ab [--rounds R] [--n N] [--pinned] [--a=SWITCHES] [--b=SWITCHES]
[--a-src DIR] [--b-src DIR] [--a1=SWITCHES] [--b1=SWITCHES] [--a2=SWITCHES] [--b2=SWITCHES]
[--handoffs N] [--steps DIR]``

Starts one nats-server (JetStream, ``sync_interval: always``) and two fleets of two
daemons on it, each fleet in a profile of its own (its own bucket): fleet A runs
``bench.fleet_variant`` with the ``--a`` switches (default ``--one-connection``: the
watches on the requests' connection), fleet B with the ``--b`` switches (default none:
the daemon as it is); ``--a-src``/``--b-src`` import meshd for that side from another
source tree (a checkout's ``src``, to compare two versions), ``--a2``/``--b2`` add
switches to that side's second host only (the one that claims), ``--a1``/``--b1`` to
its first host only (the other host, which only watches). Each round times N
claim + release pairs of a ``box:`` key on A's second host, then on B's, then floor
K2 (a compare-and-set and a create sent together, on a bucket nobody watches), in
turn, unpinned unless ``--pinned``. Prints the medians, each round's ratios and their
spread, and the load average; with ``--steps DIR`` each daemon also writes its steps'
durations there (:mod:`bench.fleet_variant`), summarised at the end; with
``--handoffs N``, N hand-offs on each side's second host after the rounds (a waiter
there granted after a release there: the release call to the grant).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.common import (
    LAT_CPUS,
    PYTHON,
    ROOT,
    LineClient,
    Place,
    Proc,
    median,
    pinned,
    wait_answering,
)
from bench.fleet import _wait_fleet, nats_server_path, start_nats
from bench.fleet_claims import _claim_pairs, _handoffs, kv_roundtrips
from bench.targets import cpu_ns, register_many


def start(
    place: Place, name: str, profile: str, url: str, switches: list[str], *, src: Path | None = None
) -> tuple[Proc, str]:
    """A daemon of ``profile`` named ``name`` in the fleet at ``url``, run by
    ``bench.fleet_variant`` with ``switches``; with ``src``, meshd is imported from that
    source tree (another checkout's ``src``) instead of this one's."""
    env = place.env(name, f'[fleet]\nurl = "{url}"\nname = "{name}"\n')
    env["MESH_PROFILE"] = profile
    env["PYTHONPATH"] = str(ROOT) if src is None else f"{src}{os.pathsep}{ROOT}"
    argv = [PYTHON, "-m", "bench.fleet_variant", *switches, "run", "--profile", profile,
            "--log-level", "warning"]  # fmt: skip
    proc = Proc(argv, env, place.root / f"{name}.log")
    wait_answering(env["MESH_SOCKET"], proc=proc.p)
    return proc, env["MESH_SOCKET"]


@contextlib.contextmanager
def maybe_pinned(on: bool, *pids: int) -> Iterator[None]:
    if on:
        with pinned(LAT_CPUS, *pids):
            yield
    else:
        yield


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fleet_ab", description=__doc__)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--n", type=int, default=150)
    ap.add_argument("--pinned", action="store_true")
    ap.add_argument("--a", default="--one-connection", help="A's switches (--a=...)")
    ap.add_argument("--b", default="", help="B's switches (--b=...)")
    ap.add_argument("--a1", default="", help="more switches for A's first host only")
    ap.add_argument("--b1", default="", help="more switches for B's first host only")
    ap.add_argument("--a2", default="", help="more switches for A's second host only")
    ap.add_argument("--b2", default="", help="more switches for B's second host only")
    ap.add_argument("--steps", type=Path)
    ap.add_argument(
        "--handoffs", type=int, default=0,
        help="then N hand-offs on each side's second host (a waiter there granted after a "
        "release there), A and B in turn, 4 blocks",
    )  # fmt: skip
    ap.add_argument("--a-src", type=Path, help="meshd for A from this source tree")
    ap.add_argument("--b-src", type=Path, help="meshd for B from this source tree")
    args = ap.parse_args()
    binary = nats_server_path()
    assert binary, "no nats-server"
    place = Place()
    root = Path(tempfile.mkdtemp(prefix="nats", dir=place.root))
    load0 = os.getloadavg()
    nats_proc, url = start_nats(root, binary)
    procs: list[Proc] = []
    try:
        socks: dict[str, str] = {}
        sides = (("A", args.a.split(), args.a_src), ("B", args.b.split(), args.b_src))
        for side, switches, src in sides:
            for i in (1, 2):
                sw = list(switches)
                if i == 1:
                    sw += (args.a1 if side == "A" else args.b1).split()
                if i == 2:
                    sw += (args.a2 if side == "A" else args.b2).split()
                if args.steps is not None:
                    args.steps.mkdir(parents=True, exist_ok=True)
                    sw += ["--steps", str(args.steps / f"{side}{i}.json")]
                p, s = start(place, f"{side.lower()}{i}", f"ab{side}", url, sw, src=src)
                procs.append(p)
                socks[f"{side}{i}"] = s
        for s in socks.values():
            _wait_fleet(s)
        register_many(socks["A2"], ["sa"])
        register_many(socks["B2"], ["sb"])
        ca, cb = LineClient(socks["A2"]), LineClient(socks["B2"])
        _claim_pairs(ca, "sa", 10)
        _claim_pairs(cb, "sb", 10)
        pids = [nats_proc.pid, *(p.pid for p in procs)]
        a_all: list[float] = []
        b_all: list[float] = []
        k2_all: list[float] = []
        rows = []
        cpu: dict[str, list[float]] = {}
        byname = dict(zip(["A1", "A2", "B1", "B2"], procs, strict=True))

        def note(label: str, c0: dict[str, float], n: int) -> None:
            for who, pid in (("claimer", 2), ("other host", 1)):
                p = byname[f"{label}{pid}"].pid
                cpu.setdefault(f"{label} {who}", []).append((cpu_ns(p) - c0[f"{label}{pid}"]) / n)
            cpu.setdefault(f"{label} nats-server", []).append(
                (cpu_ns(nats_proc.pid) - c0["nats"]) / n
            )

        def snap() -> dict[str, float]:
            return {**{k: cpu_ns(p.pid) for k, p in byname.items()}, "nats": cpu_ns(nats_proc.pid)}

        for r in range(args.rounds):
            with maybe_pinned(args.pinned, *pids):
                order = ("A", "B") if r % 2 == 0 else ("B", "A")
                got: dict[str, list[float]] = {}
                for side in order:
                    c, sid = (ca, "sa") if side == "A" else (cb, "sb")
                    c0 = snap()
                    got[side] = _claim_pairs(c, sid, args.n)[1]
                    note(side, c0, args.n)
                c0 = snap()
                t0 = time.process_time()
                k2 = kv_roundtrips(url, args.n, pair=True)
                cpu.setdefault("K2 client (this process)", []).append(
                    (time.process_time() - t0) / args.n
                )
                cpu.setdefault("K2 nats-server", []).append(
                    (cpu_ns(nats_proc.pid) - c0["nats"]) / args.n
                )
            a, b, f = median(got["A"]), median(got["B"]), 2 * median(k2)
            a_all += got["A"]
            b_all += got["B"]
            k2_all += k2
            rows.append((a, b, f))
            print(f"round {r}: A {a * 1e3:.2f} ms  B {b * 1e3:.2f} ms  2xK2 {f * 1e3:.2f} ms  "
                  f"A/2K2 {a / f:.2f}  B/2K2 {b / f:.2f}  B/A {b / a:.2f}", flush=True)  # fmt: skip
        if args.handoffs:
            hand: dict[str, list[float]] = {"A": [], "B": []}
            for side in ("A", "B"):
                register_many(socks[f"{side}2"], ["la", "lb"])
            for block in range(4):
                for side in ("A", "B") if block % 2 == 0 else ("B", "A"):
                    with maybe_pinned(args.pinned, *pids):
                        sock = socks[f"{side}2"]
                        per = max(1, args.handoffs // 4)
                        hand[side] += _handoffs(sock, sock, per, holder="la", waiting="lb")
            ha, hb = median(hand["A"]), median(hand["B"])
            counts = f"{len(hand['A'])}+{len(hand['B'])}"
            print(f"hand-off on one host (release to the waiter's grant) p50: A {ha * 1e3:.2f} ms "
                  f"B {hb * 1e3:.2f} ms  B/A {hb / ha:.2f}  ({counts})")  # fmt: skip
        # the same daemon's local claim + release (a key no fleet decides): what a
        # pair costs it without NATS
        c0 = snap()
        local = _claim_pairs(cb, "sb", args.n, res="port:bench")[1]
        cpu.setdefault("B claimer, local key", []).append(
            (cpu_ns(byname["B2"].pid) - c0["B2"]) / args.n
        )
        ca.close()
        cb.close()
        fa, fb, fk = median(a_all), median(b_all), 2 * median(k2_all)
        ra = [a / f for a, _, f in rows]
        rb = [b / f for _, b, f in rows]
        rab = [b / a for a, b, _ in rows]
        how = "pinned" if args.pinned else "unpinned"
        print(f"\nA = {args.a} {args.a2} {args.a_src or ''}  "
              f"B = {args.b} {args.b2} {args.b_src or ''}  {how}, "
              f"{args.rounds} rounds x {args.n} pairs")  # fmt: skip
        print(f"medians: A {fa * 1e3:.2f} ms ({fa / fk:.2f}x 2xK2, rounds "
              f"{min(ra):.2f}-{max(ra):.2f})  B {fb * 1e3:.2f} ms ({fb / fk:.2f}x 2xK2, rounds "
              f"{min(rb):.2f}-{max(rb):.2f})  2xK2 {fk * 1e3:.2f} ms; B/A {fb / fa:.2f} "
              f"(rounds {min(rab):.2f}-{max(rab):.2f}); B's local claim + release "
              f"{median(local) * 1e3:.2f} ms")  # fmt: skip
        print("CPU per claim + release pair (or per K2), median of rounds:")
        for label, xs in cpu.items():
            print(f"  {label:28s} {median(xs) * 1e3:.3f} ms")
    finally:
        for p in procs:
            p.stop()
        nats_proc.stop()
        load1 = os.getloadavg()
        print(f"load average {load0[0]:.1f} at the start, {load1[0]:.1f} at the end")
        place.cleanup()
    if args.steps is not None:
        time.sleep(0.2)
        for f in sorted(args.steps.glob("*.json")):
            steps = json.loads(f.read_text())
            print(f"\nsteps of {f.stem} (median ms, n):")
            for label, xs in sorted(steps.items()):
                if xs:
                    print(f"  {label:45s} {statistics.median(xs) * 1e3:7.3f}  {len(xs)}")


if __name__ == "__main__":
    main()
