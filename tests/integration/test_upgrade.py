"""SPEC §8 upgrades: a newer release opens every older release's database and keeps all
it acknowledged. ``data/meshd-0.1.0.sql`` is a database written by meshd 0.1.0 (schema
8; its header says what it holds); this release's daemon starts on it, migrates it in
place, and answers for everything in it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from tests.conftest import DaemonHandle, MeshEnv

OLD = Path(__file__).with_name("data") / "meshd-0.1.0.sql"
CONFIG = (
    "[defaults]\nhistory_days = 36500\n"  # the rows are kept whatever the date of the run
    '[jobs.backup]\nresources = ["res:disk"]\npolicy = "skip"\ncritical = true\n'
)


def test_a_database_of_0_1_0_is_opened_and_kept(mesh_env: MeshEnv) -> None:
    from meshd.store import SCHEMA_VERSION

    mesh_env.state_dir.mkdir(mode=0o700)
    mesh_env.write_config(CONFIG)
    path = mesh_env.state_dir / "test.sqlite3"
    made = sqlite3.connect(path)
    made.executescript(OLD.read_text())
    made.close()
    d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
    d.start()
    try:

        def call(method: str, **params: Any) -> Any:
            reply = d.call(method, params)
            assert "result" in reply, (method, reply)
            return reply["result"]

        sessions = {s["session_id"]: s for s in call("session.list")["sessions"]}
        claims = {(c["session_id"], c["resource"], c["token"], c["reason"])
                  for c in call("claim.list")["claims"]}  # fmt: skip
        unread = call("message.inbox", session_id="cli:reader", peek=True)["items"]
        read = call("message.inbox", session_id="cli:writer", peek=True, all=True)["items"]
        handoffs = call("handoff.list", session_id="cli:reader")["handoffs"]
        shared = call("notes.list", session_id="cli:reader")["entries"]
        own = call("notes.list", session_id="cli:writer", author="cli:writer")["entries"]
        # 0.1.0 filed a post given "/home/me/proj/" under /home/me (it did not read the
        # trailing slash) and a changed file under its folder: kept where it put them
        board = call("board.show", project_or_path="/home/me/")
        changed = call("board.show", project_or_path="/home/me/proj/src/")
        signal = call("signal.wait", name="data-ready", after=0, timeout=0.1)
        ledger = {e["key"]: e["state"] for e in call("once.list")["entries"]}
        [job] = call("job.list", name="backup")["jobs"]
        log = call("audit.log")["entries"]
        fresh = call("claim.acquire", session_id="cli:reader", resources=["res:new"])
    finally:
        d.stop()
    version = sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0]

    assert version == SCHEMA_VERSION
    assert {sid: (s["task"], s["status"]) for sid, s in sessions.items()} == {
        "cli:writer": ("refactor auth", "thinking"),
        "cli:reader": ("reading docs", "idle"),
        "cli:pauser": ("long import", "paused"),
    }
    assert (sessions["cli:writer"]["rank"], sessions["cli:writer"]["rank_by"]) == (5, "me")
    assert claims == {
        ("cli:writer", "res:gpu", 1, "training"),
        ("cli:writer", "file:/home/me/proj/src", 1, "training"),
        ("cli:reader", "res:db", 2, ""),
    }
    assert [(i["kind"], i["text"].split("\n")[0]) for i in unread if i["kind"] != "notice"] == [
        ("message", "unread hello"),
        ("handoff", "the handoff"),
    ]
    assert [(i["text"], i["state"]) for i in read if i["kind"] == "message"] == [
        ("read me", "read")
    ]
    assert sorted((h["summary"], h["to"] or "", h["next_steps"]) for h in handoffs) == [
        ("at step 3", "", []),  # the pause's checkpoint, unaddressed
        ("the handoff", "cli:reader", ["run tests"]),
    ]
    assert [n["text"] for n in shared] == ["API base is /v2", "checkpoint: at step 3"]
    assert sorted(n["text"] for n in own) == ["API base is /v2", "private thought"]
    assert [p["text"] for p in board["progress"]] == ["step one done"]
    assert [p["text"] for p in board["pitfalls"]] == ["beware the cache"]
    assert [(c["path"], c["summary"]) for c in changed["changes"]] == [
        ("/home/me/proj/src/a.py", "fixed a")
    ]
    assert (signal["seq"], signal["payload"], signal["emitted_by"]) == (
        1,
        {"rows": 10},
        "cli:writer",
    )
    assert ledger == {"pay:1": "done", "pay:2": "running"}
    assert (job["last_end"]["exit"], job["deferrals"]) == (3, 1)
    assert len(log) >= 7
    assert fresh["status"] == "granted"
    assert fresh["token"] > 4096  # above the block 0.1.0 reserved: tokens never go back
