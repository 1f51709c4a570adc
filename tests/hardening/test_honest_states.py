"""States that say no more than happened (SPEC §2, §5, §6, §7).

* A message pushed to a subscriber is ``delivered`` only once its frame went out
  in full; one that a reader dropped as too slow never got stays ``queued`` (and
  unread: nothing is lost). Before, every item pushed was ``delivered`` at once.
* The empty key is ``BAD_KEY`` naming it, not ``-32602``.
* A wire-level wait longer than ``max_query_timeout`` is capped to it, never
  refused (a claim's ``wait`` over 3,600 s was ``-32602``).
* A board project name that looks like a path (``..``, ``../../etc``) is refused.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

import pytest
from tests.conftest import DaemonHandle, MeshEnv
from tests.support import RpcClient, wait_for


@pytest.fixture(autouse=True)
def roomy(mesh_env: MeshEnv) -> MeshEnv:
    """Written before the daemon starts (autouse fixtures come first)."""
    mesh_env.write_config("[defaults]\nmessage_budget_per_minute = 100000\nmax_query_timeout = 1\n")
    return mesh_env


@pytest.fixture
def two(roomy: MeshEnv, daemon: DaemonHandle) -> Any:
    c = RpcClient(daemon)
    for sid in ("A", "B"):
        c.call(
            "session.register", session_id=sid, source="cli", pid=os.getpid(), liveness="process"
        )
    yield c
    c.close()


def test_a_push_dropped_as_too_slow_leaves_the_message_queued(
    daemon: DaemonHandle, two: RpcClient
) -> None:
    """B subscribes on a connection that never reads; A sends until the daemon drops
    it. Every message keeps waiting in B's inbox; those whose frames never went out
    are ``queued``, and only a first run of them (written before the drop) may be
    ``delivered``."""
    slow = socket.socket(socket.AF_UNIX)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(str(daemon.socket))
    req = {"jsonrpc": "2.0", "id": 1, "method": "events.subscribe", "params": {"session_id": "B"}}
    slow.sendall(json.dumps(req).encode() + b"\n")
    wait_for(lambda: slow.recv(65536, socket.MSG_PEEK))  # subscribed: its reply came
    text = "x" * 8000
    ids = []
    try:
        for _ in range(200):
            ids.append(two.call("message.send", session_id="A", to="B", text=text)["id"])
        # the daemon dropped the reader: its end of the socket is closed
        wait_for(
            lambda: b"dropped" in daemon.logs().encode() and "stopped reading" in daemon.logs()
        )
    finally:
        slow.close()

    states = two.call("message.status", session_id="A", ids=ids)["states"]
    unread = two.call("message.inbox", session_id="B", peek=True, limit=1000)["items"]

    in_order = [states[str(i)] for i in ids]
    assert "queued" in in_order
    first_queued = in_order.index("queued")
    assert set(in_order[first_queued:]) == {"queued"}  # none delivered after the drop
    assert set(in_order[:first_queued]) <= {"delivered"}
    assert len(unread) == len(ids)  # nothing lost


def test_a_push_read_in_full_is_delivered(daemon: DaemonHandle, two: RpcClient) -> None:
    events = RpcClient(daemon)
    events.call("events.subscribe", session_id="B")
    sent = two.call("message.send", session_id="A", to="B", text="hello")["id"]

    got = wait_for(
        lambda: (
            two.call("message.status", session_id="A", ids=[sent])["states"][str(sent)]
            == "delivered"
        )
    )
    events.close()

    assert got is True


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("claim.acquire", {"session_id": "A", "resources": [""]}),
        ("claim.acquire", {"session_id": "A", "resources": ["res:x", ""]}),
        ("claim.check", {"session_id": "A", "resources": [""]}),
        ("claim.validate", {"resource": "", "token": 1}),
    ],
)
def test_the_empty_key_is_bad_key(two: RpcClient, method: str, params: dict[str, Any]) -> None:
    reply = two.raw(method, **params)

    assert reply["error"]["data"]["code"] == "BAD_KEY", reply
    assert reply["error"]["data"]["key"] == ""


class TestLongWaitsAreCapped:
    def test_a_claim_wait_over_an_hour_is_capped_not_refused(self, two: RpcClient) -> None:
        two.call("claim.acquire", session_id="A", resources=["res:x"])

        reply = two.raw("claim.acquire", session_id="B", resources=["res:x"], wait=7200)

        assert reply["result"]["status"] == "held", reply
        assert reply["result"]["waited_s"] <= 30  # capped to max_query_timeout = 1 s

    def test_a_signal_wait_over_a_year_is_capped(self, two: RpcClient) -> None:
        reply = two.raw("signal.wait", name="never", timeout=10**9)

        assert "result" in reply, reply
        assert reply["result"]["received"] is False

    def test_a_job_wait_over_a_day_is_not_refused(self, two: RpcClient) -> None:
        reply = two.raw("job.wait", name="nope", timeout=10**6)

        assert reply.get("error", {}).get("code") != -32602, reply

    def test_a_resume_wait_over_a_year_is_not_refused(self, two: RpcClient) -> None:
        reply = two.raw("session.resume", session_id="A", wait=10**9)

        assert reply.get("error", {}).get("code") != -32602, reply


class TestBoardNames:
    @pytest.mark.parametrize("name", ["..", "../../etc", ".", "a/b", ".hidden", "x\\y"])
    def test_a_name_that_looks_like_a_path_is_refused(self, two: RpcClient, name: str) -> None:
        post = two.raw(
            "board.post", session_id="A", kind="progress", text="x", project_or_path=name
        )
        show = two.raw("board.show", project_or_path=name)
        changes = two.raw("board.changes", project_or_path=name)

        for reply in (post, show, changes):
            assert reply["error"]["code"] == -32602, reply
            assert "looks like a path but is not one" in reply["error"]["message"]
            assert reply["error"]["data"]["path"] == "$.project_or_path"

    def test_a_plain_name_still_works(self, two: RpcClient) -> None:
        two.call("board.post", session_id="A", kind="progress", text="x", project_or_path="infra")

        assert two.call("board.show", project_or_path="infra")["project"] == "infra"
