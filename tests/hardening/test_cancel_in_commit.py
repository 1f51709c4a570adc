"""A request cancelled while its commit is in flight (its connection closed).

The commit's writes are the writer's by then and are stored all the same, so what
they carry -- here another connection's grant, set off by the cancelled request --
must be told as committed: published and answered, never "refused" (forgotten,
taken back, its waiter answered with an error). The writer is held up by a real
SQLite write lock taken by the test (the daemon waits ``busy_timeout`` for it), and
each step waits for a state it can see, never for time.
"""

from __future__ import annotations

import contextlib
import json
import select
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import DaemonHandle
from tests.hardening.support import Client, wait_for


def _acquire(rid: int, sid: str, keys: list[str], wait: float) -> bytes:
    params = {"session_id": sid, "resources": keys, "wait": wait}
    req = {"jsonrpc": "2.0", "id": rid, "method": "claim.acquire", "params": params}
    return json.dumps(req).encode() + b"\n"


def _holders(c: Client, key: str) -> set[str]:
    claims = c.call("claim.list")["result"]["claims"]
    return {cl["session_id"] for cl in claims if cl["resource"] == key}


def _waiting(c: Client) -> set[str]:
    return {w["session_id"] for w in c.call("claim.list")["result"]["waiting"]}


def _connections(c: Client) -> int:
    return int(c.call("mesh.info")["result"]["counts"]["connections"])


def _answered(c: Client) -> bool:
    return bool(select.select([c.sock], [], [], 0)[0])


def _b_queued_behind_a(c: Client, a: Client, b: Client, keys: list[str], wait: float) -> bool:
    """a waits ``wait`` s for both keys (the first is held), then b for the second behind
    a. False when a's wait ran out first and b was granted at once (a miss: try longer)."""
    a.send(_acquire(1, "a", keys, wait))
    wait_for(lambda: "a" in _waiting(c) or _answered(a))
    b.send(_acquire(1, "b", keys[1:], 60))
    wait_for(lambda: "b" in _waiting(c) or _answered(b))  # b queued behind a
    if _answered(b):
        b.reply()
        return False
    return True


def _one_try(daemon: DaemonHandle, c: Client, n: int, wait: float) -> dict[str, Any] | None:
    """a waits for {k1, k2} (k1 held), b for {k2} behind it; a's wait runs out while the
    writer is locked, which grants b (in memory) in a's commit; a's connection closes
    then. b's reply, or None when a's wait ran out before all that was in place (a
    daemon slowed down by load): the caller tries again with a longer wait."""
    k1, k2 = f"res:one{n}", f"res:two{n}"
    assert c.call("claim.acquire", {"session_id": "holder", "resources": [k1]})["result"]
    with Client(daemon.socket) as a, Client(daemon.socket) as b:
        if not _b_queued_behind_a(c, a, b, [k1, k2], wait):
            return None
        lock = sqlite3.connect(daemon.state_dir / "test.sqlite3", isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")  # the writer cannot commit until the rollback
        try:
            wait_for(lambda: "b" in _holders(c, k2))  # a ran out and withdrew: b let go
            missed = _answered(a)  # a's commit was done before the lock: a miss
            before = _connections(c)
            a.close()  # a's request is cancelled in its commit
            wait_for(lambda: _connections(c) < before)
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        reply = b.reply()
    return None if missed else reply


Try = Callable[[DaemonHandle, Client, int, float], Any]


def _until_set(daemon: DaemonHandle, c: Client, one_try: Try) -> tuple[Any, int]:
    """Register holder, a and b, then ``one_try`` with longer waits until a's wait ran
    out only once the writer was locked: its reply, and which try (the keys' number)."""
    for sid in ("holder", "a", "b"):
        assert "result" in c.call("session.register", {"session_id": sid})
    for n, wait in enumerate((1.0, 2.0, 4.0, 8.0)):  # a longer wait if the lock came late
        reply = one_try(daemon, c, n, wait)
        if reply is not None:
            return reply, n
        assert "result" in c.call("claim.release", {"session_id": "b"})
    raise AssertionError("a's wait always ran out before the writer was locked")


def test_a_grant_carried_by_a_cancelled_commit_is_still_given(daemon: DaemonHandle) -> None:
    with Client(daemon.socket) as c:
        reply, n = _until_set(daemon, c, _one_try)
        holds = _holders(c, f"res:two{n}")

    assert reply.get("result", {}).get("status") == "granted", reply
    assert holds == {"b"}


def _syscalls(pid: int) -> set[str]:
    """What each thread of process ``pid`` is blocked in (the first word of its syscall)."""
    out = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out.add((task / "syscall").read_text().split()[0])
    return out


_SLEEPS = {"35", "230"}  # nanosleep, clock_nanosleep (x86_64): SQLite's busy handler


def _end_as_it_dies(daemon: DaemonHandle, c: Client, sid: str) -> tuple[Any, str | None]:
    """End ``sid`` while its commit waits for the lock, kill its process meanwhile;
    the reply, and the end reason stored (the end's own, or the death's if the daemon
    saw the death before the end request: a miss)."""
    child = subprocess.Popen(["sleep", "600"])
    try:
        with Client(daemon.socket) as x:
            params = {"session_id": sid, "pid": child.pid, "liveness": "process"}
            assert "result" in c.call("session.register", params)
            db = daemon.state_dir / "test.sqlite3"
            lock = sqlite3.connect(db, isolation_level=None)
            lock.execute("BEGIN IMMEDIATE")  # the end's commit waits for the rollback
            try:
                req = {"jsonrpc": "2.0", "id": 1, "method": "session.end",
                       "params": {"session_id": sid}}  # fmt: skip
                x.send(json.dumps(req).encode() + b"\n")
                assert daemon.proc is not None
                with contextlib.suppress(AssertionError):  # best effort: the end is stored
                    wait_for(lambda: _syscalls(daemon.proc.pid) & _SLEEPS, timeout=2)
                child.kill()
                child.wait()
                wait_for(lambda: sid not in _listed(c))  # ended in memory, one way or other
            finally:
                lock.execute("ROLLBACK")
                lock.close()
            reply = x.reply()
    finally:
        child.kill()
        child.wait()
    wait_for(lambda: _end_reason(db, sid) is not None)
    return reply, _end_reason(db, sid)


def _listed(c: Client) -> set[str]:
    return {s["session_id"] for s in c.call("session.list")["result"]["sessions"]}


def _end_reason(db: Path, sid: str) -> str | None:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        row = conn.execute("SELECT end_reason FROM sessions WHERE session_id=?", (sid,))
        found = row.fetchone()
    return None if found is None else found[0]


def test_an_end_whose_session_dies_during_its_commit_still_answers_ended(
    daemon: DaemonHandle,
) -> None:
    """session.end stores the end, then applies it; a session that died (its process
    exited) while the end was being stored is ended already: the end stands, and the
    reply says so instead of SESSION_EXPIRED for an end that was committed."""
    with Client(daemon.socket) as c:
        for n in range(5):
            reply, reason = _end_as_it_dies(daemon, c, f"w{n}")
            if reason == "ended":  # the end was stored first: what this test is about
                break
        assert reason == "ended", "the death was always seen before the end request"

    assert reply.get("result", {}).get("ended") is True, reply


def _refused_try(daemon: DaemonHandle, c: Client, n: int, wait: float) -> Any:
    """a waits for {k1, k2} (k1 held), b for {k2} behind it; a's wait runs out while the
    writer is locked, which grants b (in memory) in a commit the lock then refuses
    (``busy_timeout``); b's connection closes before that. a's reply (once the commit
    is refused), or None when a's wait ran out before the lock: try a longer wait."""
    k1, k2 = f"res:rone{n}", f"res:rtwo{n}"
    assert c.call("claim.acquire", {"session_id": "holder", "resources": [k1]})["result"]
    with Client(daemon.socket, timeout=60) as a, Client(daemon.socket) as b:
        if not _b_queued_behind_a(c, a, b, [k1, k2], wait):
            return None
        lock = sqlite3.connect(daemon.state_dir / "test.sqlite3", isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")  # held until the daemon's commit gives up
        try:
            wait_for(lambda: "b" in _holders(c, k2))  # a ran out: b let go, in memory
            if _answered(a) or _answered(b):  # that commit was done before the lock
                return None
            before = _connections(c)
            b.close()  # b's wait is withdrawn while its grant is being committed
            wait_for(lambda: _connections(c) < before)
            reply = a.reply()  # answered once the commit was refused (busy_timeout)
        finally:
            lock.execute("ROLLBACK")
            lock.close()
    return reply


def test_a_refused_grant_is_taken_back_when_its_waiter_left_meanwhile(
    daemon: DaemonHandle,
) -> None:
    """A grant whose commit the disk refuses holds nothing, even when its waiter's
    connection closed while it was being committed (nobody is told): memory agrees
    with the disk. It was kept: b held k2 in memory only, so b asking again was told
    ``granted`` (already held) for a claim no restart would bring back."""
    with Client(daemon.socket) as c:
        reply, n = _until_set(daemon, c, _refused_try)
        k2 = f"res:rtwo{n}"
        holds = _holders(c, k2)
        again = c.call("claim.acquire", {"session_id": "b", "resources": [k2]})["result"]
    daemon.kill()  # b was told granted: that must be on disk
    daemon.start()
    with Client(daemon.socket) as c:
        after = _holders(c, k2)

    assert reply["result"]["status"] == "held", reply
    assert holds == set()
    assert again["status"] == "granted"
    assert after == {"b"}
