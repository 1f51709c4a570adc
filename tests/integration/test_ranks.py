"""Ranks through the real daemon (SPEC §5b): set by a person, shown, kept, obeyed."""

from __future__ import annotations

import re
import threading
from typing import Any

from tests.cli.conftest import run_meshctl
from tests.conftest import DaemonHandle
from tests.support import RpcClient as Client
from tests.support import wait_for


def _wait_in_thread(daemon: DaemonHandle, sid: str, res: str, got: dict[str, Any]) -> Client:
    w = Client(daemon)
    threading.Thread(
        target=lambda: got.__setitem__(
            sid, w.call("claim.acquire", session_id=sid, resources=[res], wait=30)
        ),
        daemon=True,
    ).start()
    return w


def _waiting(c: Client) -> list[str]:
    return [w["session_id"] for w in c.call("claim.list")["waiting"]]


class TestRanks:
    def test_a_rank_set_mid_wait_serves_that_session_first(self, daemon: DaemonHandle) -> None:
        """b waits, then c; c is ranked 5 while waiting: the release goes to c, then b."""
        c = Client(daemon)
        for sid in ("a", "b", "c"):
            c.call("session.register", session_id=sid)
        c.call("claim.acquire", session_id="a", resources=["res:q"])
        got: dict[str, Any] = {}
        wb = _wait_in_thread(daemon, "b", "res:q", got)
        wait_for(lambda: _waiting(c) == ["b"])
        wc = _wait_in_thread(daemon, "c", "res:q", got)
        wait_for(lambda: _waiting(c) == ["b", "c"])

        ranked = c.call("session.prioritize", session_id="c", rank=5, by="ana")
        order = _waiting(c)
        c.call("claim.release", session_id="a")
        wait_for(lambda: "c" in got)
        still = _waiting(c)
        c.call("claim.release", session_id="c")
        wait_for(lambda: "b" in got)
        for x in (c, wb, wc):
            x.close()

        assert (ranked["rank"], ranked["rank_by"], ranked["previous"]) == (5, "ana", 0)
        assert order == ["c", "b"]
        assert got["c"]["status"] == "granted"
        assert still == ["b"]
        assert got["b"]["status"] == "granted"

    def test_rank_is_listed_and_survives_kill_9(self, daemon: DaemonHandle) -> None:
        c = Client(daemon)
        c.call("session.register", session_id="r", liveness="heartbeat")
        c.call("session.prioritize", session_id="r", rank=-3, by="ana")
        before = c.call("session.get", session_id="r")
        c.call("session.register", session_id="r", liveness="heartbeat", task="again")
        again = c.call("session.get", session_id="r")
        c.close()
        daemon.kill()
        daemon.start()
        c = Client(daemon)
        after = c.call("session.get", session_id="r")
        c.close()

        assert (before["rank"], before["rank_by"]) == (-3, "ana")
        assert before["rank_at"]
        assert (again["rank"], again["rank_by"]) == (-3, "ana")  # re-registering keeps it
        assert (after["rank"], after["rank_by"], after["rank_at"]) == (-3, "ana", before["rank_at"])

    def test_out_of_range_and_unknown_sessions_are_refused(self, daemon: DaemonHandle) -> None:
        c = Client(daemon)
        c.call("session.register", session_id="a")
        high = c.raw("session.prioritize", session_id="a", rank=101)
        ghost = c.raw("session.prioritize", session_id="ghost", rank=1)
        listed = c.call("session.get", session_id="a")
        c.close()

        assert high["error"]["data"]["code"] == "INVALID_PARAMS"
        assert ghost["error"]["data"]["code"] == "UNKNOWN_SESSION"
        assert listed["rank"] == 0


def test_meshctl_prioritize_and_sessions_active(daemon: DaemonHandle) -> None:
    """The person's command, and the rank, who set it and when in both listings."""
    c = Client(daemon)
    c.call("session.register", session_id="cli:w", task="migrate", liveness="heartbeat")
    c.close()
    env = {**daemon.env, "USER": "ana", "LOGNAME": "ana"}
    env.pop("MESH_SESSION", None)

    set_ = run_meshctl("prioritize", "cli:w", "--rank", "7", env=env)
    human = run_meshctl("sessions", "active", env=env)
    as_json = run_meshctl("sessions", "active", "--json", env=env)
    bad = run_meshctl("prioritize", "cli:w", "--rank", "200", env=env)

    assert set_.code == 0, set_
    assert "cli:w: rank 7 (was 0)" in set_.out
    assert re.search(r"rank 7 \(set by ana \d+s ago\)", human.out), human
    (w,) = [s for s in as_json.json() if s["session_id"] == "cli:w"]
    assert (w["rank"], w["rank_by"]) == (7, "ana")
    assert w["rank_at"]
    assert bad.code == 2
