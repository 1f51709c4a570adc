"""A store-first request cancelled while its commit is in flight (connection closed).

Some requests store their change *before* applying it in memory (a release, an ack,
a rank, a job's run, a pause, a resume): a change the disk refused must change
nothing. A request cancelled in that commit -- its connection closed by the daemon
(idle sweep, a reader too slow for its events) or by the client under a request that
waited (``session.resume``) -- does not take the writes back: they are the writer's
and land all the same. The change must then be applied in memory too, or the daemon
goes on with a state the disk no longer has: a claim held in memory whose release is
stored (nobody else gets the key until a restart), a message read on disk that memory
still offers as unread.

The writer is held up by a real SQLite write lock taken by the test (the daemon
waits ``busy_timeout`` for it); the daemon's idle sweep closes the connection of the
request stuck in its commit. Each step waits for a state it can see, never for time.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.conftest import DaemonHandle, MeshEnv
from tests.hardening.support import Client, wait_for

TRIES = 3
"""A loaded machine may outlast ``busy_timeout`` (the commit refused, nothing stored):
the scene is set again."""

_barriers = itertools.count()


@pytest.fixture
def idle_daemon(mesh_env: MeshEnv) -> Iterator[DaemonHandle]:
    """A daemon whose idle sweep closes a connection half a second after its last frame."""
    mesh_env.write_config("[defaults]\nidle_timeout = 0.5\n")
    d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
    d.start()
    yield d
    d.stop()


@pytest.fixture
def c(idle_daemon: DaemonHandle) -> Iterator[Client]:
    """The test's own connection: its sessions are bound to it, so it is never idle."""
    with Client(idle_daemon.socket) as client:
        for sid in ("a", "b", "z"):
            assert "result" in client.call("session.register", {"session_id": sid, "bind": True})
        yield client


def _connections(c: Client) -> int:
    return int(c.call("mesh.info")["result"]["counts"]["connections"])


def _on_disk(d: DaemonHandle, sql: str, *args: object) -> Any:
    with sqlite3.connect(d.state_dir / "test.sqlite3") as db:
        return db.execute(sql, args).fetchone()[0]


def _cancelled_in_commit(d: DaemonHandle, c: Client, method: str, params: dict[str, Any]) -> None:
    """Send ``method`` on a connection the daemon closes (idle) while the writer is
    locked; return once whatever it committed meanwhile is done."""
    lock = sqlite3.connect(d.state_dir / "test.sqlite3", isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")  # the writer cannot commit until the rollback
    try:
        alone = _connections(c)
        gone = Client(d.socket)
        wait_for(lambda: _connections(c) > alone)  # accepted
        req = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        gone.send(json.dumps(req).encode() + b"\n")
        # idle_timeout after its frame, the sweep closes it: the request is cancelled
        wait_for(lambda: _connections(c) == alone)
        gone.close()
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    # a commit behind the request's: once it is answered, the request's is done too
    barrier = {"session_id": "z", "resources": [f"res:barrier{next(_barriers)}"]}
    assert "result" in c.call("claim.acquire", barrier)


def _until_stored(scene: Callable[[int], bool]) -> int:
    """Set the scene until the cancelled request's commit landed; the try that did."""
    for n in range(TRIES):
        if scene(n):
            return n
    raise AssertionError(f"the cancelled commit was refused {TRIES} times (busy_timeout)")


def test_a_release_cancelled_in_its_commit_is_applied_in_memory(
    idle_daemon: DaemonHandle, c: Client
) -> None:
    """The release landed on disk: the claim is gone from memory too, and another
    session takes the key (memory held it until a restart)."""

    def scene(n: int) -> bool:
        key = f"res:k{n}"
        assert c.call("claim.acquire", {"session_id": "a", "resources": [key]})["result"]
        _cancelled_in_commit(idle_daemon, c, "claim.release",
                             {"session_id": "a", "resources": [key]})  # fmt: skip
        return not _on_disk(idle_daemon, "SELECT count(*) FROM claims WHERE resource=?", key)

    n = _until_stored(scene)
    held = [cl for cl in c.call("claim.list")["result"]["claims"] if cl["resource"] == f"res:k{n}"]
    taken = c.call("claim.acquire", {"session_id": "z", "resources": [f"res:k{n}"]})

    assert held == []
    assert taken["result"]["status"] == "granted"


def test_an_ack_cancelled_in_its_commit_is_applied_in_memory(
    idle_daemon: DaemonHandle, c: Client
) -> None:
    """The ack landed on disk (read): memory no longer counts the message unread."""

    def scene(n: int) -> bool:
        sent = c.call("message.send", {"session_id": "a", "to": "b", "text": f"m{n}"})["result"]
        assert c.call("message.inbox", {"session_id": "b", "peek": True})["result"]["items"]
        _cancelled_in_commit(
            idle_daemon, c, "message.ack", {"session_id": "b", "ids": [sent["id"]]}
        )
        state = _on_disk(idle_daemon, "SELECT state FROM messages WHERE id=?", sent["id"])
        return bool(state == "read")

    _until_stored(scene)
    unread = c.call("message.inbox", {"session_id": "b", "peek": True})["result"]["unread"]

    assert unread == 0
