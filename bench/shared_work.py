"""Shared work (SPEC §7): a signal's wake-up, and what ``once`` costs beside ``run``.

* ``signal wait`` woken by an ``emit``: a waiter parks ``signal.wait`` on its own
  connection (a ``mesh.ping`` behind it on the same connection answers only once
  the wait is parked), then the time from sending the emit on another connection
  to the wait's reply arriving. Target: ≤ E + W1 + 1 ms (push, not polling: the
  emit is committed, then the waiter is woken).
* ``meshctl once --key K -- true`` against ``meshctl run --res R -- true``, whole
  processes, interleaved: the ledger's reservation is one synced write more.
  Target: ≤ 1.2x.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING

from bench import floors
from bench.claims import _floors
from bench.common import LAT_CPUS, PYTHON, LineClient, median, pinned, rpc

if TYPE_CHECKING:
    from bench.targets import Ctx

EMIT, WAIT, RESERVE = "signal.emit", "signal.wait", "once.reserve"


def run(ctx: Ctx) -> None:
    missing = [m for m in (EMIT, WAIT, RESERVE) if m not in ctx.served]
    if missing:
        for name in ("signal wait woken by an emit", "meshctl once --key K -- true"):
            ctx.add("shared", name=name, value=None, unit="s",
                    skip=f"not served yet ({', '.join(missing)})")  # fmt: skip
        return
    _wake(ctx)
    _once(ctx)


def _wake(ctx: Ctx) -> None:
    e50, _, w1 = _floors(ctx)
    a, b = LineClient(ctx.sock), LineClient(ctx.sock)
    times = []
    with pinned(LAT_CPUS, ctx.meshd.pid):
        for k in range(20 if ctx.quick else 300):
            name = f"bench-wake-{k}"
            b.sock.sendall(rpc(WAIT, {"name": name, "timeout": 10}))
            b.sock.sendall(rpc("mesh.ping"))
            json.loads(b.roundtrip(b""))  # the ping: the wait is parked now
            t = time.perf_counter()
            a.sock.sendall(rpc(EMIT, {"name": name}))
            reply = json.loads(b.roundtrip(b""))
            times.append(time.perf_counter() - t)
            a.roundtrip(b"")  # the emit's own reply
            if not reply.get("result", {}).get("received"):
                raise RuntimeError(f"waiter not woken: {reply}")
    a.close()
    b.close()
    ctx.add(
        "shared",
        name="signal wait woken by an emit",
        value=median(times),
        unit="s",
        floor="E+W1+1ms",
        floor_value=(e50 + w1 + 0.001) if e50 and w1 else None,
        limit=1.0,
    )


def _once(ctx: Ctx) -> None:
    env = ctx.place.env("bench")
    env["MESH_SESSION"] = ctx.me
    meshctl = os.path.join(os.path.dirname(PYTHON), "meshctl")
    run_argv = [meshctl, "run", "--res", "res:bench-run", "--", "true"]
    times: dict[str, list[float]] = {"run": [], "once": []}
    stamp = time.time_ns()
    with pinned(LAT_CPUS, ctx.meshd.pid):
        floors.run_times(run_argv, env, 2)
        floors.run_times([meshctl, "once", "--key", f"bench-warm-{stamp}", "--", "true"], env, 1)
        for i in range(ctx.n.proc_n):
            times["run"] += floors.run_times(run_argv, env, 1)
            key = f"bench-once-{stamp}-{i}"  # a fresh key each time: every run reserves
            times["once"] += floors.run_times([meshctl, "once", "--key", key, "--", "true"], env, 1)
    r = median(times["run"])
    ctx.add(
        "shared",
        name="meshctl once --key K -- true",
        value=median(times["once"]),
        unit="s",
        floor="run --res R -- true",
        floor_value=r,
        limit=1.2,
    )
