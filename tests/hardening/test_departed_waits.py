"""A connection that hangs up has its waits withdrawn; none is granted for it meanwhile.

SPEC §5: a waiter is cancelled when its connection closes. A closing connection's
waits are withdrawn a few a turn (``Server._withdraw``), and each withdrawal may let
the waiters behind it go. Withdrawn in no particular order, an early wait of the
connection let one of its own later waits (behind it on a key) be granted, after
its client had gone: that session then held a key its client never heard of.
"""

from __future__ import annotations

import json

from tests.conftest import DaemonHandle
from tests.support import RpcClient, wait_for

PAIRS = 24
"""Pairs of waits on the departing connection: more than a few turns' worth, so the
two of a pair are withdrawn in different turns whatever order they go in."""


def test_a_departed_connections_waits_are_not_granted_by_its_own_withdrawals(
    daemon: DaemonHandle,
) -> None:
    c = RpcClient(daemon)
    c.call("session.register", session_id="holder", liveness="heartbeat")
    for i in range(PAIRS):
        for sid in (f"first{i}", f"second{i}"):
            c.call("session.register", session_id=sid, liveness="heartbeat")
    c.call("claim.acquire", session_id="holder", resources=[f"res:b{i}" for i in range(PAIRS)])
    # On one connection: first{i} waits for a{i} and b{i} (b{i} held), second{i} for
    # a{i} alone, behind first{i} (strictly FIFO: it does not barge past).
    w = RpcClient(daemon)
    frames = []
    for i in range(PAIRS):
        for rid, sid, res in ((2 * i + 1, f"first{i}", [f"res:a{i}", f"res:b{i}"]),
                              (2 * i + 2, f"second{i}", [f"res:a{i}"])):  # fmt: skip
            params = {"session_id": sid, "resources": res, "wait": 60}
            frames.append({"jsonrpc": "2.0", "id": rid, "method": "claim.acquire",
                           "params": params})  # fmt: skip
    for n, f in enumerate(frames, 1):  # in order: second{i} queues behind first{i}
        w.sock.sendall(json.dumps(f).encode() + b"\n")
        wait_for(lambda n=n: c.call("mesh.info")["counts"]["waiters"] == n)
    w.close()  # it hangs up: every wait of it is withdrawn

    wait_for(lambda: c.call("mesh.info")["counts"]["waiters"] == 0)
    c.call("mesh.ping")  # a turn more: grants a withdrawal let go are committed by now
    held = {x["session_id"] for x in c.call("claim.list")["claims"]}
    c.close()

    assert held == {"holder"}  # on main: several second{i} held a{i}
