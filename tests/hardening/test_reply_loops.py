"""One waiting request whose answer fails does not keep the others from theirs.

Queued ``claim.acquire`` requests are answered in a loop once the commit that
settled them is done (``ClaimWaits.resolve``). An answer that raised left every
record after it in that loop unanswered until its connection closed.

The trigger here is real: a folder whose name is not UTF-8 (legal on Linux). A key
through a symlink to it resolves to a path the JSON encoder cannot write, so a
``held`` reply that lists that waiter among those ``ahead`` cannot be encoded. The
daemon is SIGSTOPped past two waits' deadlines so that one pass of its timer runs
both out and one commit answers both, the failing one first.
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
    wait_for(lambda: waiters(c) == 1)
    # "first" overlaps the odd waiter: its held reply lists it ahead and cannot be
    # written; "second" overlaps only "first" and the holder: its reply can.
    send(waits["first"], "claim.acquire", session_id="first", resources=[f"file:{tree}"],
         wait=1)  # fmt: skip
    wait_for(lambda: waiters(c) == 2)
    send(waits["second"], "claim.acquire", session_id="second",
         resources=[f"file:{tree}/b"], wait=1)  # fmt: skip
    wait_for(lambda: waiters(c) == 3)
    assert daemon.proc is not None
    os.kill(daemon.proc.pid, signal.SIGSTOP)  # both deadlines pass while it is stopped
    try:
        time.sleep(1.5)
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)

    second = reply(waits["second"])  # on main: never (until its connection closed)
    first = reply(waits["first"])
    still = waiters(c)
    for x in (*waits.values(), c):
        x.close()

    assert second["result"]["status"] == "held"
    assert [h["session_id"] for h in second["result"]["holders"]] == ["holder"]
    assert still == 1  # the odd waiter waits on
    assert first["error"]["data"]["code"] == "INTERNAL"  # told, if not what it was owed


def test_a_reply_that_cannot_be_written_is_answered_internal(daemon: DaemonHandle) -> None:
    """A result the encoder refuses is a bug, answered INTERNAL like any other (and
    logged); the connection goes on. It raised out of the frame loop instead, which
    closed the connection under every request it had."""
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
    wait_for(lambda: waiters(c) == 1)

    listed = c.raw("claim.list")  # lists the odd waiter: cannot be written
    pong = c.call("mesh.ping")
    for x in (w, c):
        x.close()

    assert listed["error"]["data"]["code"] == "INTERNAL"
    assert pong["pong"] is True
