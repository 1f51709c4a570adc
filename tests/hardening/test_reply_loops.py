"""One waiting request whose answer fails does not keep the others from theirs.

Queued ``claim.acquire`` requests are answered in a loop once the commit that
settled them is done (``ClaimWaits.resolve``). An answer that raised left every
record after it in that loop unanswered until its connection closed.

The trigger these tests used is gone: a key through a symlink into a folder whose
name is not UTF-8 resolved to a path the JSON encoder could not write, so a ``held``
reply listing that waiter ``ahead`` could not be encoded. Such keys are now refused
up front (BAD_KEY, tests/hardening/test_non_utf8_paths.py), and no other real input
is known to make a waiter's answer raise: every string in a reply came in as JSON
(UTF-8) or is the daemon's own. The per-record guards (``ClaimWaits.resolve``,
``_run_out``, ``Connection.withdraw``) and the INTERNAL answer for a result the
encoder refuses stay, as defence with no known trigger. These tests now check that
the former trigger is refused and that the waits around it are answered as usual:
the daemon is SIGSTOPped past two waits' deadlines so that one pass of its timer runs
both out and one commit answers both.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

from tests.conftest import DaemonHandle
from tests.support import RpcClient, wait_for


def send(c: RpcClient, method: str, **params: Any) -> None:
    """A request whose reply is read later (:func:`reply`)."""
    req = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    c.sock.sendall(json.dumps(req).encode() + b"\n")


def reply(c: RpcClient) -> dict[str, Any]:
    line = c.file.readline()
    assert line, "the daemon closed the connection"
    return json.loads(line)  # type: ignore[no-any-return]


def waiters(c: RpcClient) -> int:
    return int(c.call("mesh.info")["counts"]["waiters"])


def test_a_failing_answer_leaves_the_next_waits_answered(daemon: DaemonHandle) -> None:
    tree = daemon.state_dir.parent / "tree"
    tree.mkdir()
    odd = os.path.join(os.fsencode(tree), b"\xff")  # not UTF-8
    os.mkdir(odd)
    os.symlink(odd, tree / "link")
    c = RpcClient(daemon)
    for sid in ("holder", "odd", "first", "second"):
        c.call("session.register", session_id=sid, liveness="heartbeat")
    c.call("claim.acquire", session_id="holder", resources=[f"file:{tree}"])
    waits = {sid: RpcClient(daemon) for sid in ("odd", "first", "second")}
    send(waits["odd"], "claim.acquire", session_id="odd", resources=[f"file:{tree}/link/a"],
         wait=120)  # fmt: skip
    odd_reply = reply(waits["odd"])  # refused up front: it never waits
    # "first" would have listed the odd waiter ahead (its reply could not be written);
    # "second" overlaps only "first" and the holder.
    send(waits["first"], "claim.acquire", session_id="first", resources=[f"file:{tree}"],
         wait=1)  # fmt: skip
    wait_for(lambda: waiters(c) == 1)
    send(waits["second"], "claim.acquire", session_id="second",
         resources=[f"file:{tree}/b"], wait=1)  # fmt: skip
    wait_for(lambda: waiters(c) == 2)
    assert daemon.proc is not None
    os.kill(daemon.proc.pid, signal.SIGSTOP)  # both deadlines pass while it is stopped
    try:
        time.sleep(1.5)
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)

    second = reply(waits["second"])
    first = reply(waits["first"])
    still = waiters(c)
    for x in (*waits.values(), c):
        x.close()

    assert odd_reply["error"]["data"]["code"] == "BAD_KEY"
    assert second["result"]["status"] == "held"
    assert [h["session_id"] for h in second["result"]["holders"]] == ["holder"]
    assert first["result"]["status"] == "held"
    assert first["result"]["ahead"] == []
    assert still == 0


def test_the_key_that_made_a_reply_unwritable_is_refused(daemon: DaemonHandle) -> None:
    """A result the encoder refuses is a bug, answered INTERNAL like any other (and
    logged; it raised out of the frame loop, closing the connection). Its one known
    trigger, a waiter on a key into a folder not named in UTF-8, is now refused
    BAD_KEY, so ``claim.list`` answers in full and the connection goes on."""
    tree = daemon.state_dir.parent / "tree"
    tree.mkdir()
    odd = os.path.join(os.fsencode(tree), b"\xff")  # not UTF-8
    os.mkdir(odd)
    os.symlink(odd, tree / "link")
    c = RpcClient(daemon)
    for sid in ("holder", "odd"):
        c.call("session.register", session_id=sid, liveness="heartbeat")
    c.call("claim.acquire", session_id="holder", resources=[f"file:{tree}"])
    w = RpcClient(daemon)
    send(w, "claim.acquire", session_id="odd", resources=[f"file:{tree}/link/a"], wait=120)
    refused = reply(w)

    listed = c.raw("claim.list")  # listed the odd waiter: could not be written
    pong = c.call("mesh.ping")
    for x in (w, c):
        x.close()

    assert refused["error"]["data"]["code"] == "BAD_KEY"
    assert [x["resource"] for x in listed["result"]["claims"]] == [f"file:{tree}"]
    assert pong["pong"] is True
