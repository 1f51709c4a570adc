"""A store-first request cancelled while its commit is in flight (connection closed).

Some requests store their change *before* applying it in memory (a release, an ack,
a rank, a job's run, a pause, a resume): a change the disk refused must change
nothing. A request cancelled in that commit -- its connection closed by the daemon
(idle sweep, a reader too slow for its events) or by the client under a request that
waited (``session.resume``) -- does not take the writes back: they are the writer's
and land all the same. The change must then be applied in memory too, or the daemon
goes on with a state the disk no longer has: here a claim held in memory whose
release is stored, so nobody else gets the key until a restart.

The writer is held up by a real SQLite write lock taken by the test (the daemon
waits ``busy_timeout`` for it); the daemon's idle sweep closes the connection of the
release stuck in its commit. Each step waits for a state it can see, never for time.
"""

from __future__ import annotations

import json
import sqlite3

from tests.conftest import DaemonHandle, MeshEnv
from tests.hardening.support import Client, wait_for


def _connections(c: Client) -> int:
    return int(c.call("mesh.info")["result"]["counts"]["connections"])


def _held_in_memory(c: Client, key: str) -> bool:
    return any(cl["resource"] == key for cl in c.call("claim.list")["result"]["claims"])


def _release_cancelled_in_commit(d: DaemonHandle, c: Client, key: str) -> tuple[bool, bool]:
    """``a`` holds ``key``; its release is sent on a connection the daemon closes (idle)
    while the writer is locked. (on disk still, in memory still) once the writer went on."""
    assert c.call("claim.acquire", {"session_id": "a", "resources": [key]})["result"]
    path = d.state_dir / "test.sqlite3"
    lock = sqlite3.connect(path, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")  # the writer cannot commit until the rollback
    try:
        alone = _connections(c)
        gone = Client(d.socket)
        wait_for(lambda: _connections(c) > alone)  # accepted
        req = {"jsonrpc": "2.0", "id": 1, "method": "claim.release",
               "params": {"session_id": "a", "resources": [key]}}  # fmt: skip
        gone.send(json.dumps(req).encode() + b"\n")
        # idle_timeout after its frame, the sweep closes it: the release is cancelled
        wait_for(lambda: _connections(c) == alone)
        gone.close()
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    # a commit behind the release's: once it is answered, the release's is done too
    assert c.call("claim.acquire", {"session_id": "z", "resources": [key + "-after"]})["result"]
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT count(*) FROM claims WHERE resource = ?", (key,)).fetchone()
    return rows[0] > 0, _held_in_memory(c, key)


def test_a_release_cancelled_in_its_commit_is_applied_in_memory(mesh_env: MeshEnv) -> None:
    """The release landed on disk: the claim is gone from memory too (it was held in
    memory until a restart, and nobody else could take the key)."""
    mesh_env.write_config("[defaults]\nidle_timeout = 0.5\n")
    d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
    d.start()
    try:
        with Client(d.socket) as c:  # bound sessions: never idle itself
            for sid in ("a", "z"):
                assert "result" in c.call("session.register", {"session_id": sid, "bind": True})
            seen = []
            for n in range(3):  # a loaded machine may outlast busy_timeout: set it again
                on_disk, in_memory = _release_cancelled_in_commit(d, c, f"res:k{n}")
                seen.append((on_disk, in_memory))
                if not on_disk:  # the release was stored: the scene was set
                    break
                assert "result" in c.call("claim.release", {"session_id": "a"})
            taken = c.call("claim.acquire", {"session_id": "z", "resources": [f"res:k{n}"]})
    finally:
        d.stop()

    assert seen[-1] == (False, False), seen
    assert taken["result"]["status"] == "granted"
