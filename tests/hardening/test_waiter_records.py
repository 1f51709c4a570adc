"""Queued claims wait as records, not tasks (third pass).

A ``claim.acquire`` that has to wait is kept as a record beside its place in the
claim queue, with the reply it owes; one timer serves every wait's deadline. These
tests hold what the task form held: the connection goes on serving meanwhile, a
grant is answered only once committed (so a kill -9 right after the reply keeps
it), a wait runs out on its own deadline whatever the others', and closing the
connection withdraws it. Each waits for states it can see, never for time.
"""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest
from tests.conftest import DaemonHandle
from tests.hardening.support import Client, held_key, wait_for


def _req(rid: int, method: str, **params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode()


def _waiting(c: Client) -> list[str]:
    return [w["session_id"] for w in c.call("claim.list")["result"]["waiting"]]


def _holders(c: Client, key: str) -> list[str]:
    claims = c.call("claim.list")["result"]["claims"]
    return [x["session_id"] for x in claims if x["resource"] == key]


def test_a_queued_acquire_is_answered_after_the_requests_behind_it(
    daemon: DaemonHandle,
) -> None:
    """Pipelined on one connection: a waiting acquire, a ping, the holder's release.
    The ping and the release are answered first; the grant comes once committed."""
    with Client(daemon.socket) as c:
        key = held_key(daemon, c, "a")
        c.send(
            _req(1, "claim.acquire", session_id="a", resources=[key], wait=60) + b"\n"
            + _req(2, "mesh.ping") + b"\n"
            + _req(3, "claim.release", session_id="holder") + b"\n"
        )  # fmt: skip
        replies = [c.reply() for _ in range(3)]

    assert [r["id"] for r in replies] == [2, 3, 1]
    grant = replies[2]["result"]
    assert grant["status"] == "granted"
    assert grant["claims"][0]["resource"] == key


def test_a_short_wait_behind_a_long_one_runs_out_first(daemon: DaemonHandle) -> None:
    """One timer serves every deadline: a wait queued after a 60 s one, with a shorter
    deadline, is answered ``held`` on its own, and the long one stays queued."""
    with Client(daemon.socket) as c, Client(daemon.socket) as a, Client(daemon.socket) as b:
        key = held_key(daemon, c, "a", "b")
        a.send(_req(1, "claim.acquire", session_id="a", resources=[key], wait=60) + b"\n")
        wait_for(lambda: _waiting(c) == ["a"])
        b.send(_req(1, "claim.acquire", session_id="b", resources=[key], wait=0.2) + b"\n")
        short = b.reply()
        still = _waiting(c)

    assert short["result"]["status"] == "held"
    assert short["result"]["holders"][0]["session_id"] == "holder"
    assert short["result"]["waited_s"] > 0
    assert still == ["a"]


def test_many_waits_run_out_and_each_is_answered_once(daemon: DaemonHandle) -> None:
    """Fifty waits on one connection with deadlines in no order: fifty ``held``
    answers, one per request id, and nothing left queued."""
    with Client(daemon.socket) as c, Client(daemon.socket) as w:
        key = held_key(daemon, c, "a")
        waits = [0.05 * ((i * 7) % 10 + 1) for i in range(50)]
        w.send(b"".join(
            _req(i, "claim.acquire", session_id="a", resources=[key], wait=t) + b"\n"
            for i, t in enumerate(waits)
        ))  # fmt: skip
        replies = [w.reply() for _ in waits]
        left = _waiting(c)

    assert sorted(r["id"] for r in replies) == list(range(50))
    assert {r["result"]["status"] for r in replies} == {"held"}
    assert left == []


def test_closing_withdraws_the_wait_and_the_key_goes_to_the_next(daemon: DaemonHandle) -> None:
    with Client(daemon.socket) as c, Client(daemon.socket) as b:
        key = held_key(daemon, c, "a", "b")
        with Client(daemon.socket) as a:
            a.send(_req(1, "claim.acquire", session_id="a", resources=[key], wait=60) + b"\n")
            wait_for(lambda: _waiting(c) == ["a"])
            b.send(_req(1, "claim.acquire", session_id="b", resources=[key], wait=60) + b"\n")
            wait_for(lambda: _waiting(c) == ["a", "b"])
        wait_for(lambda: _waiting(c) == ["b"])  # a's connection closed: a withdrawn
        assert "result" in c.call("claim.release", {"session_id": "holder"})
        granted = b.reply()
        holders = _holders(c, key)

    assert granted["result"]["status"] == "granted"
    assert holders == ["b"]


def test_a_grant_answered_to_a_record_survives_kill_9(daemon: DaemonHandle) -> None:
    """Commit before reply: the grant a queued request is told of is on disk, so a
    kill -9 the moment the reply is read keeps it, with its fencing token."""
    with Client(daemon.socket) as c, Client(daemon.socket) as a:
        key = held_key(daemon, c, "a")
        a.send(_req(1, "claim.acquire", session_id="a", resources=[key], wait=60) + b"\n")
        wait_for(lambda: _waiting(c) == ["a"])
        assert "result" in c.call("claim.release", {"session_id": "holder"})
        token = a.reply()["result"]["token"]
        daemon.kill()
    daemon.start()
    with Client(daemon.socket) as c:
        holders = _holders(c, key)
        valid = c.call("claim.validate", {"resource": key, "token": token})["result"]["valid"]

    assert holders == ["a"]
    assert valid is True


def test_a_batch_with_queued_acquires_is_answered_once_in_element_order_after_the_last(
    daemon: DaemonHandle,
) -> None:
    """A batch of two queued acquires, a ping, and the release that grants the first:
    one array, after the second's wait ran out, every element once and in order; a
    frame sent after the batch is answered before it (the connection reads on)."""
    with Client(daemon.socket) as c:
        key = held_key(daemon, c, "a", "b")
        batch = [
            json.loads(_req(1, "claim.acquire", session_id="a", resources=[key], wait=60)),
            json.loads(_req(2, "mesh.ping")),
            json.loads(_req(3, "claim.acquire", session_id="b", resources=[key], wait=0.2)),
            json.loads(_req(4, "claim.release", session_id="holder")),
        ]
        c.send(json.dumps(batch).encode() + b"\n" + _req(5, "mesh.ping") + b"\n")
        first, second = c.reply(), c.reply()
        c.send(_req(6, "mesh.ping") + b"\n")
        third = c.reply()

    assert first["id"] == 5
    assert [r["id"] for r in second] == [1, 2, 3, 4]
    assert second[0]["result"]["status"] == "granted"
    assert second[2]["result"]["status"] == "held"
    assert third["id"] == 6  # nothing else was written before it (no second answer)


@pytest.mark.slow
def test_sigterm_with_10000_records_waiting_ends_each_cleanly(daemon: DaemonHandle) -> None:
    """10,000 queued acquires on 80 connections, the key let go (shared: all of them are
    granted) and SIGTERM while those grants are being answered: every line a client
    gets is a whole grant, then its connection ends; the daemon exits 0 without a
    traceback, and what it answered is there after the restart."""
    sids = [f"w{j}" for j in range(80)]
    waiters: list[Client] = []
    try:
        with Client(daemon.socket) as c:
            key = held_key(daemon, c, *sids)
            for sid in sids:
                w = Client(daemon.socket)
                waiters.append(w)
                w.send(b"".join(
                    _req(i, "claim.acquire", session_id=sid, resources=[key], wait=600,
                         mode="shared") + b"\n"
                    for i in range(125)
                ))  # fmt: skip
            wait_for(lambda: len(_waiting(c)) == 10_000, timeout=300)
            assert "result" in c.call("claim.release", {"session_id": "holder"})
            answered = {sids[0]: [waiters[0].reply()]}  # grants are being answered now
        code = daemon.stop(signal.SIGTERM)
        for sid, w in zip(sids, waiters, strict=True):
            while (line := w.line()) is not None:
                answered.setdefault(sid, []).append(json.loads(line))
    finally:
        for w in waiters:
            w.close()
    logs = daemon.logs()
    daemon.start()
    with Client(daemon.socket) as c:
        holders = set(_holders(c, key))

    assert code == 0
    assert "Traceback" not in logs
    assert {r["result"]["status"] for rs in answered.values() for r in rs} == {"granted"}
    assert set(answered) <= holders  # whoever was told granted holds the key still
