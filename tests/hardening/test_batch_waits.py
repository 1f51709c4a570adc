"""Waits inside a batch end with their connection (issue 10 #9).

A batch is answered whole, so while one of its ``claim.acquire`` waits nobody reads
the socket. A client that sent 20 waiting acquires in one batch and hung up must
not stay queued, and must not be handed the key when its holder lets go.
"""

from __future__ import annotations

import json

from tests.conftest import DaemonHandle
from tests.hardening.support import Client, wait_for


def test_batch_waits_are_withdrawn_when_the_connection_closes(daemon: DaemonHandle) -> None:
    key = f"file:{daemon.state_dir}/k"
    with Client(daemon.socket) as c:
        for sid in ("holder", "waiter"):
            assert "result" in c.call("session.register", {"session_id": sid})
        assert "result" in c.call("claim.acquire", {"session_id": "holder", "resources": [key]})
        batch = [
            {"jsonrpc": "2.0", "id": i, "method": "claim.acquire",
             "params": {"session_id": "waiter", "resources": [key], "wait": 30}}
            for i in range(20)
        ]  # fmt: skip
        with Client(daemon.socket) as gone:
            gone.send(json.dumps(batch).encode() + b"\n")
            wait_for(lambda: c.call("claim.list")["result"]["waiting"])
        # the batch's connection is closed: its wait must go, well before its 30 s
        wait_for(lambda: not c.call("claim.list")["result"]["waiting"], timeout=5)
        assert "result" in c.call("claim.release", {"session_id": "holder"})
        claims = c.call("claim.list")["result"]["claims"]

    assert claims == []
