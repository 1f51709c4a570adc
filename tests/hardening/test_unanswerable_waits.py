"""A queued claim request whose answer cannot be given is still answered (INTERNAL).

"Every caller gets an answer": a wait answered later by a record
(``ClaimWaits.resolve``, ``ClaimWaits._run_out``) whose reply could not be built, or
whose withdrawal at its deadline raised, was logged and its caller left waiting
until its connection closed (the deadline of the second was popped off the heap, so
nothing would ever answer it). No real input is known to get there (see
tests/hardening/test_reply_loops.py), so the fault is injected into the real daemon
(:class:`FaultyDaemon`); the client, socket and store are real. A grant that was
committed stands and the error says so (docs/CONFORMANCE.md, §5 a claim request
whose reply cannot be built).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from tests.conftest import MeshEnv
from tests.hardening.support import Client, FaultyDaemon, wait_for

# The answers of queued waits only: claim_waits imports these for its records alone.
NO_GRANT_REPLY = """
import meshd.domains.claim_waits as cw
def granted(*a, **k):
    raise RuntimeError("injected: a queued grant's reply cannot be built")
cw.granted = granted
"""
NO_HELD_REPLY = """
import meshd.domains.claim_waits as cw
def held(*a, **k):
    raise RuntimeError("injected: a queued wait's held reply cannot be built")
cw.held = held
"""
# Running out the waits of session "boom" raises; with ONCE, only the timer's own
# withdrawal does (the guard's second one, without working out holders, works).
BAD_RUN_OUT = """
from meshd.core.claims.table import ClaimTable
cancel = ClaimTable.cancel_waiter
def cancel_waiter(self, wid, *, why="cancelled", wake=True):
    w = self._queue.waiters.get(wid)
    if w is not None and w.session_id == "boom" and why == "timeout" and (wake or not ONCE):
        raise RuntimeError("injected: running out this wait raises")
    return cancel(self, wid, why=why, wake=wake)
ClaimTable.cancel_waiter = cancel_waiter
"""


@contextlib.contextmanager
def _daemon(mesh_env: MeshEnv, fault: str) -> Iterator[FaultyDaemon]:
    d = FaultyDaemon(
        env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir, fault=fault
    )
    d.start()
    try:
        yield d
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.stop()


def _acquire(sid: str, key: str, wait: float) -> bytes:
    params = {"session_id": sid, "resources": [key], "wait": wait}
    return json.dumps({"jsonrpc": "2.0", "id": 7, "method": "claim.acquire", "params": params})


def _setup(d: FaultyDaemon, c: Client, *sids: str) -> list[str]:
    """Keys ``k0``, ``k1``… held by session ``holder``; ``sids`` registered too."""
    keys = [f"file:{d.state_dir}/k{i}" for i in range(2)]
    for sid in ("holder", *sids):
        assert "result" in c.call("session.register", {"session_id": sid})
    assert "result" in c.call("claim.acquire", {"session_id": "holder", "resources": keys})
    return keys


def _waiting(c: Client) -> list[str]:
    return [w["session_id"] for w in c.call("claim.list")["result"]["waiting"]]


def _holders(c: Client) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for x in c.call("claim.list")["result"]["claims"]:
        out.setdefault(x["session_id"], []).append(x["resource"])
    return out


def _queue(d: FaultyDaemon, c: Client, sid: str, key: str, wait: float) -> Client:
    """``sid`` queued for ``key`` on a connection of its own, for ``wait`` seconds; seen
    queued when the wait is long (a short one may run out before a loaded machine
    lists it, and is answered either way)."""
    w = Client(d.socket)
    w.send(_acquire(sid, key, wait).encode() + b"\n")
    if wait > 10:
        wait_for(lambda: sid in _waiting(c))
    return w


@pytest.fixture
def no_grant_reply(mesh_env: MeshEnv) -> Iterator[FaultyDaemon]:
    with _daemon(mesh_env, NO_GRANT_REPLY) as d:
        yield d


@pytest.fixture
def no_held_reply(mesh_env: MeshEnv) -> Iterator[FaultyDaemon]:
    with _daemon(mesh_env, NO_HELD_REPLY) as d:
        yield d


def _internal(reply: Any) -> dict[str, Any]:
    assert isinstance(reply, dict), reply
    err = reply["error"]
    assert (err["code"], err["data"]["code"], reply["id"]) == (-32603, "INTERNAL", 7)
    return err  # type: ignore[no-any-return]


def test_a_grant_whose_reply_cannot_be_built_is_answered_internal_and_held(
    no_grant_reply: FaultyDaemon,
) -> None:
    d = no_grant_reply
    with Client(d.socket) as c:
        keys = _setup(d, c, "boom")
        with _queue(d, c, "boom", keys[0], 60) as w:
            assert "result" in c.call(
                "claim.release", {"session_id": "holder", "resources": [keys[0]]}
            )
            err = _internal(w.reply())  # before: no reply (TimeoutError)
            assert err["data"]["granted"] is True
            assert err["data"]["resources"] == [keys[0]]
            assert "held" in err["message"]
            held = _holders(c)
            token = c.call("claim.validate", {"resource": keys[0], "token": err["data"]["token"]})
            assert c.call("mesh.ping")["result"]["pong"] is True
    assert held == {"holder": [keys[1]], "boom": [keys[0]]}
    assert token["result"]["valid"] is True


def test_a_wait_whose_held_reply_cannot_be_built_is_answered_internal(
    no_held_reply: FaultyDaemon,
) -> None:
    d = no_held_reply
    with Client(d.socket) as c:
        keys = _setup(d, c, "boom", "next")
        with (
            _queue(d, c, "boom", keys[0], 2) as w,
            _queue(d, c, "next", keys[1], 3) as x,
        ):
            first, second = _internal(w.reply()), _internal(x.reply())  # before: TimeoutError
            left = _waiting(c)
    assert first["data"]["granted"] is False
    assert second["data"]["granted"] is False
    assert left == []


@pytest.mark.parametrize("once", [True, False], ids=["raises-once", "always-raises"])
def test_a_wait_whose_run_out_raises_is_answered_and_the_timer_goes_on(
    mesh_env: MeshEnv, once: bool
) -> None:
    """Its deadline is popped off the heap: before, nothing answered it. Now INTERNAL,
    and it is never granted afterwards: out of the line, or, when even that raises,
    marked leaving (skipped, never granted: it stays in line, as a closed connection's
    wait does until its connection withdraws it). A later wait runs out as usual. The
    release's grants are made in the pass that commits it: none went to boom."""
    with _daemon(mesh_env, f"ONCE = {once}\n{BAD_RUN_OUT}") as d:
        with Client(d.socket) as c:
            keys = _setup(d, c, "boom", "calm")
            with (
                _queue(d, c, "boom", keys[0], 2) as w,
                _queue(d, c, "calm", keys[1], 3) as x,
            ):
                boom = _internal(w.reply())  # before: TimeoutError
                calm = x.reply()
                c.call("claim.release", {"session_id": "holder"})
                held = _holders(c)
                left = _waiting(c)
                pong = c.call("mesh.ping")
        assert boom["data"]["granted"] is False
        assert calm["result"]["status"] == "held"
        assert held == {}
        assert left == [] if once else set(left) <= {"boom"}
        assert pong["result"]["pong"] is True


def test_a_wait_whose_withdrawal_raised_twice_leaves_the_line_with_its_connection(
    mesh_env: MeshEnv,
) -> None:
    """Running out ``boom``'s wait raises, and so does the guard's withdrawal: it stays
    in line, marked leaving, ahead of ``next`` on the same key. Once its connection is
    gone it is out of the line, and ``next`` is granted at the release. (Before: it
    stayed in line for good, and ``next`` waited behind it until its own wait ran out.)"""
    with _daemon(mesh_env, f"ONCE = False\n{BAD_RUN_OUT}") as d, Client(d.socket) as c:
        keys = _setup(d, c, "boom", "next")
        with _queue(d, c, "boom", keys[0], 2) as w:
            boom = _internal(w.reply())
            with _queue(d, c, "next", keys[0], 60) as x:
                stuck = _waiting(c)
                w.close()
                wait_for(lambda: _waiting(c) == ["next"])
                c.call("claim.release", {"session_id": "holder", "resources": [keys[0]]})
                got = x.reply()
    assert boom["data"]["granted"] is False
    assert stuck == ["boom", "next"]
    assert got["result"]["status"] == "granted"
