"""Claims through the real daemon: conflicts, queues, fencing across restarts, losses."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import DaemonHandle, MeshEnv
from tests.support import RpcClient as Client
from tests.support import wait_for


@pytest.fixture
def c(daemon: DaemonHandle) -> Any:
    cl = Client(daemon)
    for sid in ("a", "b", "c"):
        cl.call("session.register", session_id=sid)
    yield cl
    cl.close()


@pytest.fixture
def tree(short_tmp: Path) -> Path:
    (short_tmp / "proj" / "src").mkdir(parents=True)
    return short_tmp / "proj"


class TestConflicts:
    def test_descendant_conflicts_with_ancestor(self, c: Client, tree: Path) -> None:
        """A claim on a folder covers its files; a file claim blocks the folder."""
        c.call("claim.acquire", session_id="a", resources=[f"{tree}/src/a.py"], reason="edit")

        r = c.call("claim.acquire", session_id="b", resources=[str(tree)])

        assert r["status"] == "held"
        assert [(h["session_id"], h["resource"]) for h in r["holders"]] == [
            ("a", f"file:{tree}/src/a.py")
        ]

    def test_symlinks_meet_in_one_key(self, c: Client, tree: Path) -> None:
        """A path through a symlink is the same resource as the real path."""
        link = tree.parent / "link"
        link.symlink_to(tree)
        c.call("claim.acquire", session_id="a", resources=[f"file:{link}/src/"])

        r = c.call("claim.acquire", session_id="b", resources=[f"{tree}/src"])

        assert r["status"] == "held"

    def test_atomic_set_grants_nothing_when_one_is_held(self, c: Client) -> None:
        """All or nothing: a set with one held key leaves the free ones free."""
        c.call("claim.acquire", session_id="a", resources=["port:8080"])
        r = c.call("claim.acquire", session_id="b", resources=["port:9090", "port:8080"])
        free = c.call("claim.acquire", session_id="c", resources=["port:9090"])

        assert r["status"] == "held"
        assert free["status"] == "granted"

    def test_shared_holders_coexist_but_block_exclusive(self, c: Client) -> None:
        s1 = c.call("claim.acquire", session_id="a", resources=["res:db"], mode="shared")
        s2 = c.call("claim.acquire", session_id="b", resources=["res:db"], mode="shared")
        ex = c.call("claim.acquire", session_id="c", resources=["res:db"])

        assert (s1["status"], s2["status"], ex["status"]) == ("granted", "granted", "held")

    def test_child_never_conflicts_with_parent(self, c: Client) -> None:
        c.call("session.register", session_id="kid", parent="a", slot="1")
        c.call("claim.acquire", session_id="a", resources=["cron:daily"])

        r = c.call("claim.acquire", session_id="kid", resources=["cron:daily"])

        assert r["status"] == "granted"

    def test_already_held_keeps_the_token(self, c: Client) -> None:
        first = c.call("claim.acquire", session_id="a", resources=["account:ibkr"], ttl=60)
        again = c.call("claim.acquire", session_id="a", resources=["account:ibkr"], reason="r2")

        assert again["already_held"] is True
        assert again["token"] == first["token"]

    @pytest.mark.parametrize(
        "key", ["relative/path", "file:", "bogus:x", "port:70000", "file:/", "~"]
    )
    def test_bad_keys_are_refused_by_name(self, c: Client, key: str) -> None:
        r = c.raw("claim.acquire", session_id="a", resources=[key])

        assert r["error"]["data"]["code"] == "BAD_KEY"
        assert key.split(":", maxsplit=1)[0] in r["error"]["message"]


class TestQueue:
    def test_waiter_is_pushed_the_grant_on_release(self, daemon: DaemonHandle, c: Client) -> None:
        """A queued request is answered granted right after the release, not by polling."""
        c.call("claim.acquire", session_id="a", resources=["box:gpu"])
        w = Client(daemon)
        got: list[Any] = []
        t = threading.Thread(
            target=lambda: got.append(
                w.call("claim.acquire", session_id="b", resources=["box:gpu"], wait=30)
            )
        )
        t.start()
        wait_for(lambda: c.call("claim.list")["waiting"])
        c.call("claim.release", session_id="a", resources=["box:gpu"])
        t.join(60)
        w.close()

        assert got[0]["status"] == "granted"
        assert got[0]["waited_s"] < 30

    def test_fifo_no_barging(self, daemon: DaemonHandle, c: Client) -> None:
        """A later request never passes an earlier waiter on the same key."""
        c.call("claim.acquire", session_id="a", resources=["res:q"])
        w = Client(daemon)
        t = threading.Thread(
            target=lambda: w.call("claim.acquire", session_id="b", resources=["res:q"], wait=30)
        )
        t.start()
        wait_for(lambda: c.call("claim.list")["waiting"])
        c.call("claim.release", session_id="a")

        t.join(60)
        late = c.call("claim.acquire", session_id="c", resources=["res:q"])
        w.close()

        assert late["status"] == "held"
        assert late["holders"][0]["session_id"] == "b"

    def test_wait_runs_out_as_held(self, c: Client) -> None:
        c.call("claim.acquire", session_id="a", resources=["res:slow"])

        r = c.call("claim.acquire", session_id="b", resources=["res:slow"], wait=0.3)

        assert r["status"] == "held"
        assert c.call("claim.list")["waiting"] == []

    def test_closed_connection_cancels_its_wait(self, daemon: DaemonHandle, c: Client) -> None:
        """A waiter whose connection closes is never granted."""
        c.call("claim.acquire", session_id="a", resources=["res:gone"])
        w = Client(daemon)
        frame = {
            "jsonrpc": "2.0", "id": 1, "method": "claim.acquire",
            "params": {"session_id": "b", "resources": ["res:gone"], "wait": 30},
        }  # fmt: skip
        w.sock.sendall(json.dumps(frame).encode() + b"\n")
        wait_for(lambda: c.call("claim.list")["waiting"])
        w.close()
        wait_for(lambda: not c.call("claim.list")["waiting"])
        c.call("claim.release", session_id="a")

        assert c.call("claim.list", session_id="b")["claims"] == []

    def test_wait_that_closes_a_cycle_is_refused(self, daemon: DaemonHandle, c: Client) -> None:
        c.call("claim.acquire", session_id="a", resources=["res:1"])
        c.call("claim.acquire", session_id="b", resources=["res:2"])
        w = Client(daemon)
        t = threading.Thread(
            target=lambda: w.raw("claim.acquire", session_id="a", resources=["res:2"], wait=5)
        )
        t.start()
        wait_for(lambda: c.call("claim.list")["waiting"])

        r = c.call("claim.acquire", session_id="b", resources=["res:1"], wait=5)

        c.call("claim.release", session_id="b")
        t.join(60)
        w.close()
        assert r["status"] == "held"
        assert r["deadlock"] is True


class TestLoss:
    def test_ttl_expiry_invalidates_the_token(self, daemon: DaemonHandle, c: Client) -> None:
        # ttl long enough that a loaded machine still validates before it runs out
        r = c.call("claim.acquire", session_id="a", resources=["res:t"], ttl=2.0)
        token = r["token"]
        assert c.call("claim.validate", resource="res:t", token=token)["valid"] is True

        wait_for(lambda: not c.call("claim.validate", resource="res:t", token=token)["valid"])
        nxt = c.call("claim.acquire", session_id="b", resources=["res:t"])
        assert nxt["previous"]["how"] == "ttl"

    def test_process_death_releases_at_once(self, daemon: DaemonHandle, c: Client) -> None:
        child = subprocess.Popen(["sleep", "600"])
        c.call("session.register", session_id="p", pid=child.pid, liveness="process")
        c.call("claim.acquire", session_id="p", resources=["res:dead"])
        child.kill()
        child.wait()

        wait_for(
            lambda: (
                c.call("claim.acquire", session_id="b", resources=["res:dead"])["status"]
                == "granted"
            )
        )
        log = c.call("audit.log", resource="res:dead")["entries"]
        assert [e["action"] for e in log][:2] == ["grant", "lose"]

    def test_steal_takes_and_tells(self, c: Client) -> None:
        c.call("claim.acquire", session_id="a", resources=["res:s"])

        r = c.call("claim.steal", session_id="b", resources=["res:s"], reason="a is stuck")

        assert r["status"] == "granted"
        assert [h["session_id"] for h in r["stolen"]] == ["a"]
        actions = [e["action"] for e in c.call("audit.log", resource="res:s")["entries"]]
        assert actions == ["grant", "steal", "grant"]


class TestCheck:
    def test_present_includes_recent_changes(self, c: Client, tree: Path) -> None:
        """b works elsewhere but just changed a file under the path: it is present."""
        c.call("session.register", session_id="w")  # no cwd: present only by its change
        changed = tree / "src" / "a.py"
        c.call("board.changed", session_id="w", paths=[str(changed)])

        r = c.call("claim.check", session_id="a", resources=[str(tree / "src")])

        assert r["status"] == "free"
        assert [(p["session_id"], p["why"], p["path"]) for p in r["present"]] == [
            ("w", "changed", str(changed.resolve()))
        ]
        assert any("w recently changed" in w for w in r["warnings"])

    def test_who_changed_the_file_comes_before_who_works_around_it(
        self, c: Client, tree: Path
    ) -> None:
        """A writer must learn first who just changed this very file: the CLI names
        only the first few present sessions, so the change must not hide behind six
        sessions that merely work in the project (registered before it)."""
        for i in range(6):
            c.call("session.register", session_id=f"near{i}", cwd=str(tree))
        c.call("session.register", session_id="w")
        changed = tree / "src" / "a.py"
        c.call("board.changed", session_id="w", paths=[str(changed)])

        r = c.call("claim.check", session_id="a", resources=[str(changed)])

        assert (r["present"][0]["session_id"], r["present"][0]["why"]) == ("w", "changed")
        assert sorted(p["session_id"] for p in r["present"][1:]) == [f"near{i}" for i in range(6)]

    def test_all_profiles_is_not_a_param(self, c: Client) -> None:
        """The daemon answers for its own profile; the CLI asks each daemon (decided:
        removed from the schema rather than accepted and ignored)."""
        reply = c.raw("claim.check", resources=["res:x"], all_profiles=True)

        assert reply["error"]["code"] == -32602
        assert "all_profiles" in reply["error"]["message"]


class TestLossNotices:
    """A holder that was not listening learns of each loss from its inbox (SPEC §5), and
    its heartbeat reports the loss with ``lost_after`` (how a library handle learns it)."""

    @staticmethod
    def notices(c: Client, sid: str) -> list[dict[str, Any]]:
        items = c.call("message.inbox", session_id=sid, peek=True)["items"]
        return [i for i in items if i["kind"] == "notice"]

    def test_ttl_expiry_is_a_durable_notice(self, c: Client) -> None:
        token = c.call("claim.acquire", session_id="a", resources=["res:t"], ttl=0.2)["token"]

        wait_for(lambda: self.notices(c, "a"))
        (item,) = self.notices(c, "a")
        lost = c.call("session.heartbeat", session_id="a", lost_after=0)["lost"]

        assert item["from"] == "meshd"
        assert f"res:t (token {token}) expired" in item["text"]
        assert [(e["kind"], e["resources"], e["token"], e["id"]) for e in lost] == [
            ("claim.expired", ["res:t"], token, item["id"])
        ]
        assert c.call("session.heartbeat", session_id="a", lost_after=item["id"])["lost"] == []
        assert c.call("session.heartbeat", session_id="a")["lost"] == []  # not asked

    def test_steal_is_a_durable_notice(self, c: Client) -> None:
        token = c.call("claim.acquire", session_id="a", resources=["res:s"])["token"]
        c.call("claim.steal", session_id="b", resources=["res:s"], reason="a is stuck")

        (item,) = self.notices(c, "a")
        (lost,) = c.call("session.heartbeat", session_id="a", lost_after=0)["lost"]

        assert item["text"] == f"your claim on res:s (token {token}) was stolen by b — a is stuck"
        assert (lost["kind"], lost["by"], lost["reason"]) == ("claim.stolen", "b", "a is stuck")

    def test_session_expiry_is_a_durable_notice(self, daemon: DaemonHandle, c: Client) -> None:
        """A heartbeat session that expires loses its claims; registering again under the
        same id finds the notice waiting, and its heartbeat reports the loss."""
        c.call("session.register", session_id="x", expire_after=0.3)
        token = c.call("claim.acquire", session_id="x", resources=["res:e"])["token"]

        wait_for(lambda: "error" in c.raw("session.get", session_id="x"))
        c.call("session.register", session_id="x")
        (item,) = self.notices(c, "x")
        (lost,) = c.call("session.heartbeat", session_id="x", lost_after=0)["lost"]

        assert f"res:e (token {token}) was released because the session expired" in item["text"]
        assert (lost["kind"], lost["how"], lost["id"]) == ("claim.lost", "expired", item["id"])

    def test_subscriber_is_pushed_one_event_carrying_the_notice(
        self, daemon: DaemonHandle, c: Client
    ) -> None:
        """A live subscriber gets the typed event, which names the inbox item (no second push)."""
        listener = Client(daemon)
        listener.call("events.subscribe", session_id="a")
        c.call("claim.acquire", session_id="a", resources=["res:p"])
        c.call("claim.steal", session_id="b", resources=["res:p"], reason="now")
        c.call("mesh.ping")
        event = json.loads(listener.file.readline())["params"]
        listener.call("mesh.ping")
        assert listener.events == []  # nothing else was pushed before this reply
        listener.close()

        (item,) = self.notices(c, "a")
        assert event["kind"] == "claim.stolen"
        assert (event["id"], event["text"], event["state"]) == (
            item["id"],
            item["text"],
            "delivered",
        )


class TestReleaseNotice:
    def test_subscriber_is_told_its_claims_were_released(
        self, daemon: DaemonHandle, c: Client
    ) -> None:
        """SPEC §6 lists ``released`` among the claim notices a subscribed connection
        gets: a release made on another connection (the CLI acting for a library
        session) is pushed as ``claim.released``, and nothing is kept in the inbox
        (nothing was lost). Before: no event at all."""
        listener = Client(daemon)
        listener.call("events.subscribe", session_id="a")
        token = c.call("claim.acquire", session_id="a", resources=["res:r1", "res:r2"])["token"]
        c.call("claim.release", session_id="a", resources=["res:r1", "res:nothing"])
        event = json.loads(listener.file.readline())["params"]
        listener.close()

        assert (event["kind"], event["session_id"], event["resources"], event["token"]) == (
            "claim.released",
            "a",
            ["res:r1"],
            token,
        )
        assert event["how"] == "released"
        assert TestLossNotices.notices(c, "a") == []


class TestRestart:
    def test_claims_and_tokens_survive_kill_9(self, daemon: DaemonHandle, c: Client) -> None:
        """Claims come back after kill -9 and new tokens are above every old one."""
        tokens = [
            c.call("claim.acquire", session_id="a", resources=[f"res:k{i}"])["token"]
            for i in range(5)
        ]
        c.close()
        daemon.kill()
        daemon.start()
        c2 = Client(daemon)
        held = c2.call("claim.acquire", session_id="b", resources=["res:k0"])
        new = c2.call("claim.acquire", session_id="b", resources=["res:new"])
        valid = c2.call("claim.validate", resource="res:k4", token=tokens[-1])
        c2.close()

        assert held["status"] == "held"
        assert new["token"] > max(tokens)
        assert valid["valid"] is True

    def test_audit_log_is_pruned_by_history_days(
        self, daemon: DaemonHandle, c: Client, mesh_env: MeshEnv
    ) -> None:
        """Audit rows older than history_days go at the daemon's next prune (SPEC §2)."""
        import sqlite3

        c.call("claim.acquire", session_id="a", resources=["res:old"])
        c.call("claim.acquire", session_id="a", resources=["res:new"])
        c.close()
        daemon.stop()
        with sqlite3.connect(mesh_env.state_dir / "test.sqlite3") as db:
            db.execute("UPDATE audit SET at = at - 31 * 86400 WHERE resource = 'res:old'")
        daemon.start()  # its first sweep prunes

        def logged() -> set[str]:
            return {e["resource"] for e in rpc_result(daemon, "audit.log")["entries"]}

        wait_for(lambda: "res:old" not in logged())
        assert logged() == {"res:new"}


def rpc_result(daemon: DaemonHandle, method: str, **params: Any) -> Any:
    reply = daemon.call(method, params)
    assert "result" in reply, reply
    return reply["result"]


def test_disabled_mesh_grants_as_a_no_op(mesh_env: MeshEnv) -> None:
    mesh_env.write_config("[defaults]\nenabled = false\n")
    d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
    d.start()
    try:
        r = d.call("claim.acquire", {"session_id": "x", "resources": ["res:a"]})["result"]
    finally:
        d.stop()

    assert (r["status"], r["disabled"]) == ("granted", True)


def test_pipelined_acquire_then_release_run_in_order(daemon: DaemonHandle) -> None:
    """Frames sent back to back on one connection are handled in the order sent,
    unless one has to wait: an acquire then a release leave nothing held."""
    c = Client(daemon)
    c.call("session.register", session_id="p")
    frames = b""
    for i in range(50):
        for n, method in ((2 * i, "claim.acquire"), (2 * i + 1, "claim.release")):
            req = {
                "jsonrpc": "2.0", "id": 1000 + n, "method": method,
                "params": {"session_id": "p", "resources": [f"res:pipe{i}"]},
            }  # fmt: skip
            frames += json.dumps(req).encode() + b"\n"
    c.sock.sendall(frames)
    replies = [json.loads(c.file.readline()) for _ in range(100)]
    held = c.call("claim.list", session_id="p")["claims"]
    c.close()

    assert [r["id"] for r in replies] == list(range(1000, 1100))
    assert held == []
