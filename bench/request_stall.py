"""How long the worst single request of a method holds the event loop.

``python -m bench.request_stall [--src SRC] [--rounds N]`` starts one daemon, registers
a session, and for each method with per-item work sends its largest request (1,000
deep paths that do not exist for the board, 256 deep ``file:`` keys for claims, a
broadcast to 200 sessions by a deep path, the 10,000 newest of 10,000 notes, 500
notes of 8,000 characters: just under the 4 MiB one ``notes.list`` answers) while a
prober pings on a connection of its own. It prints, per method, the request's round
trip and the pings that overlapped it (p99 and max, ms), next to the idle ping.
``--src`` runs the daemon from another source tree (``git archive`` of an older
commit), for a before/after. On a shared machine, ``chrt -f 10 python -m
bench.request_stall`` (root) runs it, the daemon and the prober above every other
process, so what the pings show is the daemon's loop, not the neighbours' load.

A ping is answered only between two turns of the loop: a request that works on the
loop for 1 s shows as a ping of 1 s. The target ("no single request stalls the
daemon") is a ping under 50 ms during the worst request of any method.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from typing import Any

from bench.common import PYTHON, LineClient, Place, Proc, pct, rpc, wait_answering

DEPTH = 40
NOTES = 10_000
"""Notes in the notebook, and the most one ``notes.list`` returns (its ``limit``'s cap)."""


def deep(root: str, i: int) -> str:
    """A path ``DEPTH`` folders deep under a folder that does not exist."""
    return root + f"/nx{i}/" + "/".join(f"d{k}" for k in range(DEPTH)) + "/f.py"


def scenarios(root: str) -> dict[str, tuple[str, dict[str, Any]]]:
    paths = [deep(root, i) for i in range(1000)]
    deep_keys = [f"file:{deep(root, i)}" for i in range(256)]  # refused: TOO_LARGE
    # the most a claim call takes (meshd.domains.claims.MAX_FOLDERS): 256 keys, 8 deep
    keys = [f"file:{root}/nx{i}/" + "/".join(f"d{k}" for k in range(5)) for i in range(256)]
    return {
        "board.changed": ("board.changed", {"session_id": "w", "paths": paths}),
        "board.touch": ("board.touch", {"session_id": "w", "paths": paths}),
        "board.watch": ("board.watch", {"session_id": "w", "paths": paths}),
        "claim.acquire": ("claim.acquire", {"session_id": "w", "resources": keys}),
        "claim.check": ("claim.check", {"session_id": "w", "resources": keys}),
        "claim.release": ("claim.release", {"session_id": "w", "resources": keys}),
        "claim.acquire (too deep)": (
            "claim.acquire",
            {"session_id": "w", "resources": deep_keys},
        ),
        "notes.list": ("notes.list", {"session_id": "w", "author": "w", "limit": NOTES}),
        "notes.list (4 MiB)": ("notes.list", {"session_id": "w", "author": "w2", "limit": 500}),
        "broadcast.send": (
            "broadcast.send",
            {"session_id": "w", "text": "x", "path": deep(root, 0)},
        ),
    }


def probe(path: str, stop: threading.Event, out: list[tuple[float, float]]) -> None:
    """Ping until ``stop``; each ping as (start, round trip)."""
    c = LineClient(path, timeout=60)
    frame = rpc("mesh.ping")
    clock = time.perf_counter
    while not stop.is_set():
        t = clock()
        c.roundtrip(frame)
        out.append((t, clock() - t))
        time.sleep(0.0005)
    c.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", help="run the daemon from this src folder")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    place = Place()
    env = place.env("bench", "[defaults]\nmessage_budget_per_minute = 100000\n")
    if a.src:
        env["PYTHONPATH"] = os.path.abspath(a.src)
    argv = [PYTHON, "-m", "meshd", "run", "--profile", "bench", "--log-level", "warning"]
    proc = Proc(argv, env, place.root / "bench.log")
    sock = env["MESH_SOCKET"]
    wait_answering(sock, proc=proc.p)
    try:
        c = LineClient(sock, timeout=120)
        for i in range(200):
            params = {"session_id": f"s{i}", "source": "cli", "cwd": deep(str(place.root), 0)}
            c.roundtrip(rpc("session.register", params))
        c.roundtrip(rpc("session.register", {"session_id": "w", "source": "cli"}))
        for i in range(NOTES):
            c.roundtrip(rpc("notes.add", {"session_id": "w", "text": f"note {i} " + "x" * 200}))
        c.roundtrip(rpc("session.register", {"session_id": "w2", "source": "cli"}))
        for _ in range(500):  # 4,000,000 characters: just under notes.list's 4 MiB
            c.roundtrip(rpc("notes.add", {"session_id": "w2", "text": "y" * 8000}))
        pings: list[tuple[float, float]] = []
        stop = threading.Event()
        t = threading.Thread(target=probe, args=(sock, stop, pings))
        t.start()
        time.sleep(3.0)
        idle = [rt for _, rt in pings]
        rows = {}
        for name, (method, params) in scenarios(str(place.root)).items():
            worst, trips, during = 0.0, [], []
            for _ in range(a.rounds):
                start = time.perf_counter()
                reply = json.loads(c.roundtrip(rpc(method, params)))
                end = time.perf_counter()
                trips.append(end - start)
                time.sleep(0.2)
                got = [rt for s, rt in list(pings) if s + rt >= start and s <= end]
                during += got
                worst = max([worst, *got])
                if "error" in reply:
                    code = reply["error"].get("data", {}).get("code", reply["error"]["code"])
                    rows[name] = {
                        "refused": code,
                        "request_ms": round(max(trips) * 1000, 1),
                        "ping_max_ms": round(worst * 1000, 2),
                    }
                    break
                if method == "claim.acquire":
                    c.roundtrip(rpc("claim.release", {"session_id": "w", "all": True}))
            else:
                rows[name] = {
                    "request_ms": round(max(trips) * 1000, 1),
                    "ping_p99_ms": round(pct(during, 0.99) * 1000, 2) if during else None,
                    "ping_max_ms": round(worst * 1000, 2),
                }
        stop.set()
        t.join()
        head = {
            "idle_ping_p99_ms": round(pct(idle, 0.99) * 1000, 2),
            "idle_ping_max_ms": round(max(idle) * 1000, 2),
        }
        print(json.dumps({**head, **rows}))
    finally:
        proc.stop()
        place.cleanup()


if __name__ == "__main__":
    main()
