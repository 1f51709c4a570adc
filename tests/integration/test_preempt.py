"""Preempt -> pause -> resume through the real daemon (SPEC §5b)."""

from __future__ import annotations

import functools
import re
import sqlite3
import threading
from typing import Any

from tests.cli.conftest import run_meshctl
from tests.conftest import DaemonHandle, MeshEnv
from tests.support import RpcClient as Client
from tests.support import wait_for


def waiting(c: Client, sid: str) -> bool:
    """Whether ``sid`` is in the claim queue."""
    return sid in str(c.call("claim.list")["waiting"])


def setup(daemon: DaemonHandle, *ranked: tuple[str, int]) -> Client:
    c = Client(daemon)
    for sid, rank in ranked:
        c.call("session.register", session_id=sid, liveness="heartbeat")
        if rank:
            c.call("session.prioritize", session_id=sid, rank=rank, by="ana")
    return c


def inbox(c: Client, sid: str) -> list[str]:
    return [i["text"] for i in c.call("message.inbox", session_id=sid, peek=True)["items"]]


def audit(c: Client, sid: str) -> list[tuple[str, str]]:
    return [(e["action"], e["how"]) for e in c.call("audit.log", session_id=sid)["entries"]]


class TestPreempt:
    def test_equal_rank_is_refused_and_nobody_is_asked(self, daemon: DaemonHandle) -> None:
        c = setup(daemon, ("low", 0), ("peer", 0))
        c.call("claim.acquire", session_id="low", resources=["res:x"])

        out = c.call("claim.preempt", session_id="peer", resources=["res:x"], reason="mine")
        told = inbox(c, "low")
        c.close()

        assert (out["status"], out["reason"]) == ("held", "rank")
        assert [h["session_id"] for h in out["holders"]] == ["low"]
        assert told == []

    def test_holder_is_told_who_why_and_the_grace(self, daemon: DaemonHandle) -> None:
        c = setup(daemon, ("low", 0), ("boss", 5))
        sub = Client(daemon)
        sub.call("events.subscribe", session_id="low")
        c.call("claim.acquire", session_id="low", resources=["res:x"])

        out = c.call("claim.preempt", session_id="boss", resources=["res:x"], reason="release")
        event = None
        while event is None or event.get("method") != "event":
            event = json_line(sub)
        told = inbox(c, "low")
        held = c.call("claim.list", session_id="low")["claims"]
        log = audit(c, "low")
        sub.close()
        c.close()

        assert out["status"] == "asked"
        assert out["grace_s"] == 300
        params = event["params"]
        assert (params["kind"], params["by"], params["reason"]) == ("preempt", "boss", "release")
        assert params["resources"] == ["res:x"]
        assert params["grace_s"] == 300
        assert "boss (rank 5) asks you (rank 0) to checkpoint and pause" in told[0]
        assert params["id"] is not None
        assert [x["resource"] for x in held] == ["res:x"]  # nothing is taken by force
        assert ("preempt", "grace 300 s") in log

    def test_a_preemptor_asking_twice_is_first_once(self, daemon: DaemonHandle) -> None:
        """Two preemptions by one session (one key each): the pause names it once."""
        c = setup(daemon, ("low", 0), ("boss", 5))
        c.call("claim.acquire", session_id="low", resources=["res:a", "res:b"])
        c.call("claim.preempt", session_id="boss", resources=["res:a"])
        c.call("claim.preempt", session_id="boss", resources=["res:b"])

        paused = c.call("session.pause", session_id="low", note="n")
        c.close()

        assert paused["reserved"] == ["res:a", "res:b"]
        assert paused["first"] == ["boss"]

    def test_pause_hands_the_set_to_the_preemptor_then_resume_returns_the_note(
        self, daemon: DaemonHandle
    ) -> None:
        c = setup(daemon, ("low", 0), ("boss", 5), ("stranger", 0))
        c.call("claim.acquire", session_id="low", resources=["res:x"])
        c.call("claim.preempt", session_id="boss", resources=["res:x"])
        got: dict[str, Any] = {}
        waiters = [Client(daemon) for _ in range(2)]
        for w, sid in zip(waiters, ("stranger", "boss"), strict=True):
            threading.Thread(target=wait_in, args=(w, sid, got), daemon=True).start()
            wait_for(functools.partial(waiting, c, sid))

        paused = c.call("session.pause", session_id="low", note="stopped after step 3")
        wait_for(lambda: "boss" in got)
        status = c.call("session.get", session_id="low")["status"]
        early = c.raw("claim.acquire", session_id="stranger", resources=["res:x"])
        c.call("claim.release", session_id="boss")
        resumed = c.call("session.resume", session_id="low", wait=5)
        after = c.call("session.get", session_id="low")["status"]
        holders = [x["session_id"] for x in c.call("claim.list")["claims"]]
        notes = c.call("notes.list", session_id="boss")["entries"]
        log = audit(c, "low")
        for x in (*waiters, c):
            x.close()

        assert (paused["reserved"], paused["first"]) == (["res:x"], ["boss"])
        assert paused["handoff_id"] is not None
        assert got["boss"]["status"] == "granted"
        assert status == "paused"
        assert early["result"]["status"] == "held"
        assert (resumed["status"], resumed["reservation"]) == ("resumed", "kept")
        assert resumed["note"] == "stopped after step 3"
        assert resumed["resources"] == ["res:x"]
        assert after == "idle"
        assert holders == ["low"]
        assert "stranger" not in got  # still waiting: the reserved set kept it out
        assert any(n["text"] == "checkpoint: stopped after step 3" for n in notes)
        assert ("pause", "") in log
        assert ("resume", "") in log

    def test_the_preemptor_takes_the_set_a_key_at_a_time_then_the_owner_resumes(
        self, daemon: DaemonHandle
    ) -> None:
        """The preemptor asked for two keys and claims them one by one: it is first for
        both, and the paused session is next when it releases. (Before: its first grant
        handed the set to the owner, and its second claim was held by
        ``reserved:low``.)"""
        c = setup(daemon, ("low", 0), ("boss", 5))
        c.call("claim.acquire", session_id="low", resources=["res:a", "res:b"])
        c.call("claim.preempt", session_id="boss", resources=["res:a", "res:b"])
        c.call("session.pause", session_id="low", note="n")

        one = c.call("claim.acquire", session_id="boss", resources=["res:a"])
        two = c.call("claim.acquire", session_id="boss", resources=["res:b"])
        early = c.call("session.resume", session_id="low", wait=0.1)
        c.call("claim.release", session_id="boss")
        resumed = c.call("session.resume", session_id="low", wait=5)
        c.close()

        assert (one["status"], two["status"]) == ("granted", "granted")
        assert early["status"] == "held"
        assert {h["resource"] for h in early["holders"] if h["session_id"] == "boss"} == {
            "res:a",
            "res:b",
        }
        assert (resumed["status"], resumed["resources"]) == ("resumed", ["res:a", "res:b"])

    def test_a_steal_from_a_reserved_set_tells_the_paused_session(
        self, daemon: DaemonHandle
    ) -> None:
        """SPEC §5: a steal tells the holders. The holder of a reserved set is the paused
        session: it is told (an inbox notice and the event), ``previous`` names it, and
        no notice is stored for the internal holder ``reserved:ID``. (Before: the notice
        went to ``reserved:low``, which no one reads, and ``previous`` named it.)"""
        c = setup(daemon, ("low", 0), ("other", 0))
        sub = Client(daemon)
        sub.call("events.subscribe", session_id="low")
        c.call("claim.acquire", session_id="low", resources=["res:x", "res:y"])
        c.call("session.pause", session_id="low", note="n")

        got = c.call("claim.steal", session_id="other", resources=["res:x"], reason="hotfix")
        event = None
        while event is None or event.get("method") != "event":
            event = json_line(sub)
        told = inbox(c, "low")
        with sqlite3.connect(daemon.state_dir / "test.sqlite3") as db:
            ghost = db.execute("SELECT text FROM messages WHERE to_session LIKE 'reserved:%'")
            ghosts = ghost.fetchall()
        sub.close()
        c.close()

        assert got["previous"]["session_id"] == "low"
        assert (event["params"]["kind"], event["params"]["by"]) == ("claim.stolen", "other")
        assert event["params"]["resources"] == ["res:x"]
        assert len(told) == 1
        assert "res:x, kept for you in your reserved set" in told[0]
        assert "stolen by other — hotfix" in told[0]
        assert ghosts == []

    def test_preempting_a_paused_session_s_reserved_set_serves_the_preemptor_first(
        self, daemon: DaemonHandle
    ) -> None:
        """A session that paused on its own (nobody preempting) keeps its set reserved.
        A higher-ranked session that preempts it then is served first, as if it had
        asked before the pause (the paused session is at its checkpoint already, and is
        not asked again); an equal rank is refused. (Before: "free", nothing to
        preempt, and the claim that followed was held by ``reserved:low``.)"""
        c = setup(daemon, ("low", 0), ("boss", 5), ("chief", 7), ("peer", 0))
        c.call("claim.acquire", session_id="low", resources=["res:x"])
        c.call("session.pause", session_id="low", note="n")

        peer = c.call("claim.preempt", session_id="peer", resources=["res:x"])
        said = run_meshctl("preempt", "res:x", env={**daemon.env, "MESH_SESSION": "chief"})
        out = c.call("claim.preempt", session_id="boss", resources=["res:x"], reason="urgent")
        got = c.call("claim.acquire", session_id="boss", resources=["res:x"])
        told = inbox(c, "low")
        log = audit(c, "low")
        c.call("claim.release", session_id="boss")
        chief = c.call("claim.acquire", session_id="chief", resources=["res:x"])
        c.call("claim.release", session_id="chief")
        resumed = c.call("session.resume", session_id="low", wait=5)
        c.close()

        assert (peer["status"], peer["reason"]) == ("held", "rank")
        assert said.code == 0, said
        assert said.out.startswith("served first: low (rank 0) is paused; its reserved set")
        assert out["status"] == "asked"
        assert [(h["session_id"], h["resources"], h["paused"]) for h in out["holders"]] == [
            ("low", ["res:x"], True)
        ]
        assert got["status"] == "granted"
        assert chief["status"] == "granted"  # the other preemptor's turn comes next
        assert told == []  # paused already: nothing to ask of it
        assert ("preempt", "served first on the reserved set") in log
        assert (resumed["status"], resumed["resources"]) == ("resumed", ["res:x"])

    def test_resumed_claims_keep_the_reason_they_were_taken_with(
        self, daemon: DaemonHandle
    ) -> None:
        """Resume re-takes the paused claims with their own reason -- none stays none --
        not "resume" (the resume itself is in the audit log as its own action)."""
        c = setup(daemon, ("low", 0), ("other", 0))
        c.call("claim.acquire", session_id="low", resources=["res:a"])
        c.call("claim.acquire", session_id="other", resources=["res:b"], reason="training")
        reasons = {}
        for sid in ("low", "other"):
            c.call("session.pause", session_id=sid, note="n")
            resumed = c.call("session.resume", session_id=sid, wait=5)
            assert resumed["status"] == "resumed"
            claims = c.call("claim.list", session_id=sid)["claims"]
            reasons[sid] = [x["reason"] for x in claims]
        log = audit(c, "low")
        c.close()

        assert reasons == {"low": [""], "other": ["training"]}
        assert ("resume", "") in log

    def test_grace_expiry_tells_the_preemptor(
        self, mesh_env: MeshEnv, daemon: DaemonHandle
    ) -> None:
        mesh_env.write_config("[defaults]\npreempt_grace = 0.3\n")
        c = setup(daemon, ("low", 0), ("boss", 5))
        assert c.call("mesh.reload")["reloaded"]
        c.call("claim.acquire", session_id="low", resources=["res:x"])
        c.call("claim.preempt", session_id="boss", resources=["res:x"], reason="deploy")

        wait_for(lambda: any("grace of your preemption ran out" in t for t in inbox(c, "boss")))
        text = next(t for t in inbox(c, "boss") if "ran out" in t)
        held = [x["session_id"] for x in c.call("claim.list")["claims"]]
        c.close()

        assert "low still holds res:x" in text  # one holder: holds
        assert "you may steal" in text
        assert held == ["low"]

    def test_a_preemptor_that_never_claims_loses_its_turn_and_resume_is_granted(
        self, mesh_env: MeshEnv, daemon: DaemonHandle
    ) -> None:
        """The preemptor has ``preempt_grace`` from the pause to take the reserved set;
        then the set is the paused session's again and its queued resume is granted.
        (Before: a preemptor that never claimed kept ``resume`` waiting for ever.)"""
        mesh_env.write_config("[defaults]\npreempt_grace = 0.5\n")
        c = setup(daemon, ("cli:low", 0), ("cli:boss", 5))
        assert c.call("mesh.reload")["reloaded"]
        c.call("claim.acquire", session_id="cli:low", resources=["res:gpu"])
        c.call("claim.preempt", session_id="cli:boss", resources=["res:gpu"])
        low = {**daemon.env, "MESH_SESSION": "cli:low"}
        paused = run_meshctl("pause", "--note", "epoch 4", env=low)

        resumed = run_meshctl("resume", "--wait", "20", env=low)
        held = [x["session_id"] for x in c.call("claim.list")["claims"]]
        log = audit(c, "cli:low")
        c.close()

        assert paused.code == 0, paused
        assert resumed.code == 0, resumed
        assert "note: epoch 4" in resumed.out
        assert held == ["cli:low"]
        assert ("preempt", "the preemptor's turn ran out") in log

    def test_a_restart_loses_the_reservation_and_resume_says_so(self, daemon: DaemonHandle) -> None:
        c = setup(daemon, ("low", 0), ("boss", 5))
        c.call("claim.acquire", session_id="low", resources=["res:x"])
        c.call("session.pause", session_id="low", note="halfway")
        c.close()
        daemon.kill()
        daemon.start()
        c = Client(daemon)
        status = c.call("session.get", session_id="low")["status"]
        resumed = c.call("session.resume", session_id="low", wait=1)
        c.close()

        assert status == "paused"
        assert (resumed["status"], resumed["reservation"]) == ("resumed", "lost")
        assert resumed["note"] == "halfway"


class TestPausedWaits:
    def test_a_claim_queued_before_the_pause_is_answered_held_and_never_granted(
        self, daemon: DaemonHandle
    ) -> None:
        """SPEC §5b is silent on a pausing session's queued waits: they are withdrawn
        at the pause and answered ``held`` (docs/CONFORMANCE.md). Left queued, the
        wait was granted while the session was paused."""
        c = setup(daemon, ("low", 0), ("other", 0))
        c.call("claim.acquire", session_id="low", resources=["res:x"])
        c.call("claim.acquire", session_id="other", resources=["res:y"])
        got: dict[str, Any] = {}
        w = Client(daemon)
        t = threading.Thread(target=wait_for_y, args=(w, got), daemon=True)
        t.start()
        wait_for(functools.partial(waiting, c, "low"))

        c.call("session.pause", session_id="low", note="stopping here")
        c.call("claim.release", session_id="other")  # left queued, low got res:y here
        t.join(30)
        held = [x["resource"] for x in c.call("claim.list", session_id="low")["claims"]]
        queue = c.call("claim.list")["waiting"]
        resumed = c.call("session.resume", session_id="low", wait=5)
        w.close()
        c.close()

        assert got["low"]["status"] == "held"
        assert [h["session_id"] for h in got["low"]["holders"]] == ["other"]
        assert held == []  # not granted res:y while paused
        assert queue == []
        assert resumed["resources"] == ["res:x"]  # what it held comes back; not res:y


def wait_for_y(w: Client, got: dict[str, Any]) -> None:
    """Queue low for res:y; its reply (if one comes before the test closes it)."""
    try:
        got["low"] = w.call("claim.acquire", session_id="low", resources=["res:y"], wait=60)
    except (OSError, ValueError, AssertionError):
        pass


def wait_in(w: Client, sid: str, got: dict[str, Any]) -> None:
    """Queue for res:x (a wait far longer than the test: on a loaded machine a short one
    runs out while the test still looks); the reply, if one comes before the test
    closes the connection."""
    try:
        got[sid] = w.call("claim.acquire", session_id=sid, resources=["res:x"], wait=600)
    except (OSError, ValueError):
        pass


def json_line(c: Client) -> dict[str, Any]:
    import json

    return json.loads(c.file.readline())  # type: ignore[no-any-return]


def test_meshctl_preempt_pause_resume(daemon: DaemonHandle) -> None:
    c = setup(daemon, ("cli:low", 0), ("cli:boss", 3))
    c.call("claim.acquire", session_id="cli:low", resources=["res:gpu"])
    c.close()
    boss = {**daemon.env, "MESH_SESSION": "cli:boss"}
    low = {**daemon.env, "MESH_SESSION": "cli:low"}

    asked = run_meshctl("preempt", "res:gpu", "--reason", "training run", env=boss)
    refused = run_meshctl("preempt", "res:gpu", env=low)
    paused = run_meshctl("pause", "--note", "checkpointed at epoch 4", env=low)
    early = run_meshctl("resume", "--wait", "0.2", env=low)  # kept for boss first
    took = run_meshctl("claim", "res:gpu", env=boss)
    run_meshctl("release", "res:gpu", env=boss)
    resumed = run_meshctl("resume", "--wait", "2", env=low)

    assert asked.code == 0, asked
    assert "asked: cli:low (rank 0) holds res:gpu" in asked.out
    assert re.search(r"grace \d+ s, until \d\d:\d\d", asked.out), asked
    assert refused.code == 0, refused  # low holds it itself: nobody else to ask
    assert refused.out.strip() == "free: no other session holds it; nothing to preempt", refused
    assert paused.code == 0, paused
    assert "paused; reserved res:gpu (first for cli:boss)" in paused.out
    assert early.code == 75, early
    assert "held: still paused" in early.out
    assert "the wait ran out after 0.2 s; still paused" in early.err
    assert took.code == 0, took
    assert resumed.code == 0, resumed
    assert "note: checkpointed at epoch 4" in resumed.out
