"""Event-loop stall during snapshots: a heartbeat loader and a ping prober.

The loader (``python -m bench.stall SOCKET N INTERVAL SECONDS change|steady``) runs
in its own process and heartbeats sessions ``big0 … big{N-1}`` once every
INTERVAL, spread evenly over it, 25 pipelined frames at a time. With ``change``
every heartbeat carries a new task, so every session is dirty at every snapshot;
with ``steady`` none is. The prober pings on a kept connection meanwhile and
keeps every round-trip time: a snapshot that blocks the event loop shows up as
the slowest pings.
"""

from __future__ import annotations

import json
import sys
import time

from bench.common import LineClient, pct, rpc

GROUP = 25


def loader(path: str, n: int, interval: float, seconds: float, change: bool) -> None:
    c = LineClient(path, timeout=30)
    end = time.monotonic() + seconds
    gen = 0
    while time.monotonic() < end:
        gen += 1
        t0 = time.monotonic()
        frames = []
        for i in range(n):
            params: dict[str, object] = {"session_id": f"big{i}"}
            if change:
                params["task"] = f"step {gen} of the refactor"
            frames.append(
                json.dumps(
                    {"jsonrpc": "2.0", "id": i, "method": "session.heartbeat", "params": params},
                    separators=(",", ":"),
                ).encode()
                + b"\n"
            )
        groups = [b"".join(frames[i : i + GROUP]) for i in range(0, n, GROUP)]
        pace = interval / max(1, len(groups))
        for k, g in enumerate(groups):
            c.sock.sendall(g)
            got = 0
            while got < min(GROUP, n - k * GROUP):
                data = c.sock.recv(65536)
                if not data:
                    return
                got += data.count(b"\n")
            delay = t0 + (k + 1) * pace - time.monotonic()
            if delay > 0:
                time.sleep(delay)


def probe(path: str, seconds: float, gap: float = 0.0005) -> dict[str, float]:
    """Ping for ``seconds``; p50, p99, p99.9 and max of the round trips."""
    c = LineClient(path, timeout=30)
    frame = rpc("mesh.ping")
    times = []
    clock = time.perf_counter
    end = clock() + seconds
    while clock() < end:
        t = clock()
        c.roundtrip(frame)
        times.append(clock() - t)
        time.sleep(gap)
    c.close()
    return {
        "p50": pct(times, 0.5),
        "p99": pct(times, 0.99),
        "p999": pct(times, 0.999),
        "max": max(times) if times else float("nan"),
        "n": len(times),
    }


if __name__ == "__main__":
    a = sys.argv[1:]
    loader(a[0], int(a[1]), float(a[2]), float(a[3]), a[4] == "change")
