"""Waits dropped by their connection leave no cyclic garbage.

In the 10,000-waiter storm the clients hang up with every wait queued. Each wait
that ended by raising the connection's cancellation left a reference cycle (anyio's
``task_done`` keeps the error, whose traceback holds the wait's frames), so the
daemon's collector found ~190,000 objects at once and paused the loop for 0.3-1 s.

The daemon runs here under a launcher that keeps whatever the collector finds
(``gc.DEBUG_SAVEALL``) and, at exit, counts what of the waits is among it: frames of
a wait's task (``_wait``, the task form before the third pass), its record
(``_Wait``) and reply sink (``_Answer``). A wait that ended cleanly is freed by its
reference count and is never there. No timing: the count is exact.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import DaemonHandle, MeshEnv
from tests.support import Client, wait_for

# meshd in this process, with the collector keeping its garbage; at exit, one last
# collection and the count of wait frames found.
_LAUNCHER = """
import atexit, gc, runpy, sys
gc.set_debug(gc.DEBUG_SAVEALL)
out = sys.argv.pop(1)
def count():
    gc.collect()
    n = sum(1 for o in gc.garbage
            if type(o).__name__ in ("_Wait", "_Answer")
            or type(o).__name__ == "frame" and o.f_code.co_name == "_wait")
    with open(out, "w") as f:
        f.write(str(n))
atexit.register(count)
sys.argv[0] = "meshd"
runpy.run_module("meshd", run_name="__main__", alter_sys=True)
"""


@dataclass
class GarbageCountingDaemon(DaemonHandle):
    out: Path = Path()

    def meshd_argv(self) -> list[str]:
        return [sys.executable, "-c", _LAUNCHER, str(self.out)]


def _acquire(rid: int, sid: str, key: str) -> bytes:
    params: dict[str, Any] = {"session_id": sid, "resources": [key], "wait": 30}
    req = {"jsonrpc": "2.0", "id": rid, "method": "claim.acquire", "params": params}
    return json.dumps(req).encode() + b"\n"


def test_waits_dropped_by_a_closing_connection_leave_no_cycles(mesh_env: MeshEnv) -> None:
    out = mesh_env.root / "wait-frames"
    d = GarbageCountingDaemon(
        env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir, out=out
    )
    d.start()
    try:
        key = f"file:{mesh_env.state_dir}/k"
        waiters = [f"w{i}" for i in range(10)]
        with Client(d.socket) as c:
            for sid in ("holder", *waiters):
                assert "result" in c.call("session.register", {"session_id": sid})
            assert "result" in c.call("claim.acquire", {"session_id": "holder", "resources": [key]})
            with Client(d.socket) as gone:  # pipelined, as the storm's clients send
                gone.send(b"".join(_acquire(i, sid, key) for i, sid in enumerate(waiters)))
                wait_for(lambda: len(c.call("claim.list")["result"]["waiting"]) == 10)
            wait_for(lambda: not c.call("claim.list")["result"]["waiting"])
    finally:
        assert d.stop() == 0, d.logs()

    assert out.read_text() == "0"
