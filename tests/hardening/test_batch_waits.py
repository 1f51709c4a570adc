"""Waits inside a batch (SPEC §3: batches are not atomic).

A batch is answered as one array, once its last element is done. An element that
waits (a queued ``claim.acquire``) holds up neither the elements after it nor the
connection's next frames, and ends with its connection: a client that sent 20
waiting acquires in one batch and hung up must not stay queued, and must not be
handed the key when its holder lets go.

Each test waits for states it can see (``claim.list`` from another connection, a
reply that must come first), never for time.
"""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import DaemonHandle
from tests.hardening.support import Client, held_key, wait_for


def _acquire(rid: int, sid: str, key: str, wait: float = 0) -> dict[str, Any]:
    params: dict[str, Any] = {"session_id": sid, "resources": [key]}
    if wait:
        params["wait"] = wait
    return {"jsonrpc": "2.0", "id": rid, "method": "claim.acquire", "params": params}


def _waiting(c: Client) -> list[Any]:
    return list(c.call("claim.list")["result"]["waiting"])


def test_batch_waits_are_withdrawn_when_the_connection_closes(daemon: DaemonHandle) -> None:
    with Client(daemon.socket) as c:
        key = held_key(daemon, c, "waiter")
        batch = [_acquire(i, "waiter", key, wait=30) for i in range(20)]
        with Client(daemon.socket) as gone:
            gone.send(json.dumps(batch).encode() + b"\n")
            wait_for(lambda: _waiting(c))
        # the batch's connection is closed: its wait must go, well before its 30 s
        wait_for(lambda: not _waiting(c))
        assert "result" in c.call("claim.release", {"session_id": "holder"})
        claims = c.call("claim.list")["result"]["claims"]

    assert claims == []


def test_a_waiting_batch_does_not_hold_up_the_next_frames(daemon: DaemonHandle) -> None:
    """The batch waits; a ping sent after it on the same connection is answered first,
    and the batch's reply comes once its element is granted."""
    with Client(daemon.socket) as c, Client(daemon.socket) as b:
        key = held_key(daemon, c, "waiter")
        b.send(json.dumps([_acquire(1, "waiter", key, wait=30)]).encode() + b"\n")
        wait_for(lambda: _waiting(c))
        b.send(b'{"jsonrpc":"2.0","id":2,"method":"mesh.ping"}\n')
        first = b.reply()
        assert "result" in c.call("claim.release", {"session_id": "holder"})
        second = b.reply()

    assert first["id"] == 2
    assert first["result"]["pong"] is True
    assert [r["id"] for r in second] == [1]
    assert second[0]["result"]["status"] == "granted"


def test_elements_after_a_waiting_one_run_at_once(daemon: DaemonHandle) -> None:
    """[wait for a held key, take a free one, wait again]: the free key is taken and
    both waits are queued while the first still waits; the one reply lists all three
    in the batch's order, though the second was done first."""
    with Client(daemon.socket) as c, Client(daemon.socket) as b:
        key = held_key(daemon, c, "w1", "w2", "free")
        free = f"file:{daemon.state_dir}/free"
        batch = [
            _acquire(1, "w1", key, wait=30),
            _acquire(2, "free", free),
            _acquire(3, "w2", key, wait=30),
        ]
        b.send(json.dumps(batch).encode() + b"\n")
        wait_for(lambda: len(_waiting(c)) == 2)
        holders = {cl["session_id"] for cl in c.call("claim.list")["result"]["claims"]}
        assert holders == {"holder", "free"}  # the element after the waiting one ran
        assert "result" in c.call("claim.release", {"session_id": "holder"})
        wait_for(lambda: len(_waiting(c)) == 1)  # w1 has it, w2 still waits
        assert "result" in c.call("claim.release", {"session_id": "w1"})
        replies = b.reply()

    assert [r["id"] for r in replies] == [1, 2, 3]
    assert [r["result"]["status"] for r in replies] == ["granted"] * 3
    assert replies[0]["result"]["token"] < replies[2]["result"]["token"]  # FIFO kept


def test_a_batch_that_runs_out_answers_held(daemon: DaemonHandle) -> None:
    """A wait that runs out inside a batch: ``held`` in its place, the rest answered."""
    with Client(daemon.socket) as c, Client(daemon.socket) as b:
        key = held_key(daemon, c, "waiter")
        batch = [
            _acquire(1, "waiter", key, wait=0.01),
            {"jsonrpc": "2.0", "id": 2, "method": "mesh.ping"},
            {"jsonrpc": "2.0", "method": "mesh.ping"},  # a notification: no element
        ]
        b.send(json.dumps(batch).encode() + b"\n")
        replies = b.reply()

    assert [r["id"] for r in replies] == [1, 2]
    assert replies[0]["result"]["status"] == "held"
    assert replies[1]["result"]["pong"] is True
