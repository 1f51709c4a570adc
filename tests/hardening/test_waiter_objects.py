"""A queued ``claim.acquire`` leaves one object for the cyclic collector.

In the 10,000-waiter storm every object a wait keeps alive and tracked is walked by
each middle-generation collection (and counted towards the next one): with a record,
its reply sink, the core's waiter, a key and a tuple of keys per wait, those
collections paused the loop for ~1 ms about fifteen times a storm, and the pings
that met them set its p99. Now the core's waiter is untracked (it can be in no
cycle), waiters on one key share its key and their tuple of keys, and the reply
sink is the connection's: the record alone is left.

The daemon runs here under a launcher that, on SIGUSR1, collects and writes how many
objects the collector tracks, by type. The count is taken before and after 200
waits queue on one key; no timing.
"""

from __future__ import annotations

import json
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import DaemonHandle, MeshEnv
from tests.support import Client, wait_for

_LAUNCHER = """
import collections, gc, json, os, runpy, signal, sys
out = sys.argv.pop(1)
def count(signum, frame):
    gc.collect()
    c = collections.Counter(type(o).__name__ for o in gc.get_objects())
    with open(out + ".tmp", "w") as f:
        json.dump(c, f)
    os.replace(out + ".tmp", out)
signal.signal(signal.SIGUSR1, count)
sys.argv[0] = "meshd"
runpy.run_module("meshd", run_name="__main__", alter_sys=True)
"""

WAITS = 200


@dataclass
class CountingDaemon(DaemonHandle):
    out: Path = Path()

    def meshd_argv(self) -> list[str]:
        return [sys.executable, "-c", _LAUNCHER, str(self.out)]

    def tracked(self) -> dict[str, int]:
        """The objects the collector tracks, by type name, after a collection."""
        self.out.unlink(missing_ok=True)
        assert self.proc is not None
        self.proc.send_signal(signal.SIGUSR1)
        counts: dict[str, int] = wait_for(
            lambda: self.out.exists() and json.loads(self.out.read_text())
        )
        return counts


def _acquire(rid: int, sid: str, key: str) -> bytes:
    params: dict[str, Any] = {"session_id": sid, "resources": [key], "wait": 60}
    req = {"jsonrpc": "2.0", "id": rid, "method": "claim.acquire", "params": params}
    return json.dumps(req).encode() + b"\n"


def test_a_queued_acquire_leaves_one_tracked_object(mesh_env: MeshEnv) -> None:
    d = CountingDaemon(
        env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir,
        out=mesh_env.root / "tracked.json",
    )  # fmt: skip
    d.start()
    try:
        key = f"file:{mesh_env.state_dir}/k"
        waiters = [f"w{i}" for i in range(WAITS)]
        with Client(d.socket) as c, Client(d.socket) as w1, Client(d.socket) as w2:
            for sid in ("holder", *waiters):
                assert "result" in c.call("session.register", {"session_id": sid})
            assert "result" in c.call("claim.acquire", {"session_id": "holder", "resources": [key]})
            for w in (w1, w2):  # the waits' connections, open already
                assert "result" in w.call("mesh.ping")
            before = d.tracked()
            half = WAITS // 2  # as the storm's clients: 100 pipelined a connection (< 128)
            w1.send(b"".join(_acquire(i, sid, key) for i, sid in enumerate(waiters[:half])))
            w2.send(b"".join(_acquire(i, sid, key) for i, sid in enumerate(waiters[half:])))
            wait_for(lambda: len(c.call("claim.list")["result"]["waiting"]) == WAITS)
            after = d.tracked()
    finally:
        assert d.stop() == 0, d.logs()

    grown = {t: after.get(t, 0) - before.get(t, 0) for t in after}
    assert grown.get("_Wait") == WAITS  # the record: it is in cycles (its connection's)
    assert grown.get("Waiter", 0) == 0  # the core's: untracked
    assert grown.get("Answer", 0) <= 0  # the connection's one reply sink
    assert grown.get("Key", 0) <= 1  # one key, shared by every wait on it
    # Nothing else grows with the waits (on main: Key, Answer, Waiter and a tuple each,
    # 5.2 objects a wait in all; here 1.4, the rest being the two connections' own).
    with_the_waits = {t for t, n in grown.items() if n >= WAITS // 2}
    assert with_the_waits == {"_Wait"}, sorted(grown.items(), key=lambda kv: -kv[1])[:8]
