"""The notebook through the real daemon: who reads what, across ends and restarts."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.hardening.support import wait_for
from tests.integration.test_board import Client, register

DaemonHandle = Any


@pytest.fixture
def trio(daemon: DaemonHandle) -> Any:
    c = Client(daemon)
    for sid in ("A", "B", "C"):
        register(c, sid)
    yield c
    c.close()


def texts(c: Client, **params: Any) -> list[str]:
    return [e["text"] for e in c.call("notes.list", **params)["entries"]]


class TestNotebook:
    def test_b_reads_what_a_wrote_down_but_never_a_private_note(self, trio: Client) -> None:
        """A notes something; B asks what A wrote down and gets it, private notes aside."""
        trio.call("notes.add", session_id="A", text="API base is /v2")
        trio.call("notes.add", session_id="A", text="hunch: flaky test", private=True)

        assert texts(trio, session_id="B", author="A") == ["API base is /v2"]
        assert texts(trio, session_id="A") == ["API base is /v2", "hunch: flaky test"]
        assert texts(trio) == ["API base is /v2"]

    def test_notebooks_outlive_their_session_and_a_restart(
        self, daemon: DaemonHandle, trio: Client
    ) -> None:
        """The shared note stays for everyone; the private one stays in the store but
        belonged to the registration that ended, so nobody reads it any more."""
        trio.call("notes.add", session_id="A", text="kept")
        trio.call("notes.add", session_id="A", text="mine", private=True)
        trio.call("session.end", session_id="A")
        trio.close()
        daemon.kill()
        daemon.start()
        c = Client(daemon)

        after = c.call("notes.list", session_id="A")["entries"]
        c.close()
        with sqlite3.connect(daemon.state_dir / "test.sqlite3") as db:
            stored = db.execute("SELECT text FROM notes ORDER BY id").fetchall()

        assert [(e["session_id"], e["text"], e["private"]) for e in after] == [
            ("A", "kept", False),
        ]
        assert stored == [("kept",), ("mine",)]

    def test_a_live_session_reads_its_private_notes_after_a_kill_9(
        self, daemon: DaemonHandle, trio: Client
    ) -> None:
        """The registration is stored with the session: the same live session still
        reads its private note once the daemon is back."""
        trio.call("notes.add", session_id="A", text="mine", private=True)
        trio.close()
        daemon.kill()
        daemon.start()
        c = Client(daemon)

        after = texts(c, session_id="A")
        theirs = texts(c, session_id="B", author="A")
        c.close()

        assert (after, theirs) == (["mine"], [])

    def test_a_note_over_max_body_bytes_is_refused_and_not_kept(self, trio: Client) -> None:
        reply = trio.raw("notes.add", session_id="A", text="x" * 9000)

        assert reply["error"]["data"]["code"] == "TOO_LARGE"
        assert texts(trio, session_id="A") == []

    def test_an_unknown_author_is_refused(self, trio: Client) -> None:
        reply = trio.raw("notes.add", session_id="nobody", text="x")

        assert reply["error"]["data"]["code"] == "UNKNOWN_SESSION"


class TestPrivateNotesBelongToTheRegistration:
    """SPEC §4: a private note is its registration's, not its id's."""

    def test_naming_the_author_after_it_ended_reads_no_private_note(self, trio: Client) -> None:
        trio.call("notes.add", session_id="A", text="open")
        trio.call("notes.add", session_id="A", text="secret", private=True)
        trio.call("session.end", session_id="A")

        assert texts(trio, session_id="A") == ["open"]
        assert texts(trio, session_id="A", author="A") == ["open"]

    def test_a_new_session_under_the_same_id_never_reads_the_old_ones(
        self, daemon: DaemonHandle, trio: Client
    ) -> None:
        trio.call("notes.add", session_id="A", text="secret", private=True)
        trio.call("session.end", session_id="A")
        register(trio, "A")  # the same id, the same process: a new registration
        trio.call("notes.add", session_id="A", text="new", private=True)

        now = texts(trio, session_id="A")
        trio.close()
        daemon.kill()
        daemon.start()
        c = Client(daemon)
        after_restart = texts(c, session_id="A")
        c.close()

        assert now == ["new"]
        assert after_restart == ["new"]

    def test_a_refresh_by_the_same_process_keeps_them(self, trio: Client) -> None:
        trio.call("notes.add", session_id="A", text="secret", private=True)
        again = trio.call(
            "session.register", session_id="A", source="cli", pid=os.getpid(), liveness="process"
        )

        assert again["refreshed"] is True
        assert texts(trio, session_id="A") == ["secret"]

    def test_a_pidless_heartbeat_session_is_taken_over_only_with_replace(
        self, trio: Client
    ) -> None:
        """A live heartbeat session with no process: a process registering its id is
        refused (ID_IN_USE) unless it says --replace; the one that replaces it is a new
        registration and does not read the old one's private note."""
        trio.call("session.register", session_id="H", source="shell", liveness="heartbeat")
        trio.call("notes.add", session_id="H", text="secret", private=True)
        refreshed = trio.call(
            "session.register", session_id="H", source="shell", liveness="heartbeat"
        )

        taken = trio.raw("session.register", session_id="H", source="cli", pid=os.getpid())
        kept = texts(trio, session_id="H")
        replaced = trio.call(
            "session.register", session_id="H", source="cli", pid=os.getpid(), replace=True
        )

        assert refreshed["refreshed"] is True  # the same caller again, with no process
        assert taken["error"]["data"]["code"] == "ID_IN_USE"
        assert kept == ["secret"]
        assert replaced["refreshed"] is False
        assert texts(trio, session_id="H") == []
        assert trio.raw("session.get", session_id="H")["result"]["pid"] == os.getpid()

    def test_replace_never_takes_a_session_from_a_live_process(self, trio: Client) -> None:
        child = subprocess.Popen(["sleep", "600"])
        try:
            trio.call("session.register", session_id="P", source="cli", pid=child.pid)
            reply = trio.raw(
                "session.register", session_id="P", source="cli", pid=os.getpid(), replace=True
            )
        finally:
            child.kill()
            child.wait()

        assert reply["error"]["data"]["code"] == "ID_IN_USE"


# --- private notes never leak, by any method ---------------------------------------------

READS: list[tuple[str, dict[str, Any]]] = [
    ("notes.list", {}),
    ("notes.list", {"author": "A"}),
    ("notes.list", {"author": "B"}),
    ("session.list", {}),
    ("session.get", {"session_id": "A"}),
    ("message.inbox", {"all": True}),
    ("handoff.list", {"all": True}),
    ("query.ask", {"to": "A", "question": "what did you write down?", "timeout": 1}),
    ("board.changes", {}),
    ("board.show", {"project_or_path": "/"}),
    ("once.list", {}),
    ("signal.wait", {"name": "n", "timeout": 0}),
]


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    notebook=st.lists(st.tuples(st.sampled_from("ABC"), st.booleans()), min_size=1, max_size=8),
    reader=st.sampled_from(["B", "C", None]),
    methods=st.lists(st.sampled_from(range(len(READS))), min_size=1, max_size=4),
)
def test_private_notes_reach_no_other_session_by_any_method(
    daemon: DaemonHandle,
    trio: Client,
    notebook: list[tuple[str, bool]],
    reader: str | None,
    methods: list[int],
) -> None:
    """Random notebooks, readers and read methods: no answer to the reader, and no
    event pushed to it, carries a private note of another session."""
    secret: set[str] = set()
    events = Client(daemon)
    if reader is not None:
        events.call("events.subscribe", session_id=reader)
    for author, private in notebook:
        text = f"{'secret' if private else 'open'}-{uuid.uuid4().hex[:12]}"
        trio.call("notes.add", session_id=author, text=text, private=private)
        if private and author != reader:
            secret.add(text)
    answers: list[Any] = []
    for i in methods:
        method, params = READS[i]
        if reader is not None and method in ("notes.list", "message.inbox", "query.ask"):
            params = {**params, "session_id": reader}
        elif reader is None and method in ("message.inbox", "query.ask"):
            continue  # these act for a session
        answers.append(trio.raw(method, **params))
    events.settle(0, quiet=0.05)
    answers.extend(events.events)
    events.close()

    seen = json.dumps(answers)

    assert not [s for s in secret if s in seen]


def test_notes_outlive_history_days(daemon: DaemonHandle) -> None:
    """SPEC §2: notes are kept until deleted. A note written 31 days ago (aged in the
    database while the daemon is down) is still there after the next start's first
    prune, which does take an audit row as old."""
    c = Client(daemon)
    register(c, "A")
    c.call("notes.add", session_id="A", text="old")
    c.call("claim.acquire", session_id="A", resources=["res:old"])
    c.close()
    daemon.stop()
    with sqlite3.connect(daemon.state_dir / "test.sqlite3") as db:
        db.execute("UPDATE notes SET at = at - 31 * 86400 WHERE text = 'old'")
        db.execute("UPDATE audit SET at = at - 31 * 86400 WHERE resource = 'res:old'")
    daemon.start()
    c = Client(daemon)

    def audited() -> set[str]:
        return {e["resource"] for e in c.call("audit.log")["entries"]}

    wait_for(lambda: "res:old" not in audited())  # the prune ran
    left = texts(c)
    c.close()

    assert left == ["old"]


def test_a_private_note_from_before_registrations_were_kept(daemon: DaemonHandle) -> None:
    """A database written before notes kept their registration: the session that was
    live then (restored, its record without one either) still reads its private note;
    once it ends, the same id registered again does not."""
    from meshd.store.schema import MIGRATIONS
    from meshd.store.shared import DDL_NOTE_REG

    c = Client(daemon)
    register(c, "A")
    c.call("notes.add", session_id="A", text="secret", private=True)
    c.close()
    daemon.stop()
    with sqlite3.connect(daemon.state_dir / "test.sqlite3") as db:
        db.execute("ALTER TABLE notes DROP COLUMN reg")
        # and every later migration's work, undone: they run again from that version
        db.execute("ALTER TABLE handoffs DROP COLUMN by_status")  # migration 11
        (record,) = db.execute("SELECT record FROM sessions WHERE session_id = 'A'").fetchone()
        old = {k: v for k, v in json.loads(record).items() if k != "reg"}
        db.execute(
            "UPDATE sessions SET record = ? WHERE session_id = 'A'", (json.dumps(old).encode(),)
        )
        db.execute(f"PRAGMA user_version = {MIGRATIONS.index(DDL_NOTE_REG)}")
    daemon.start()
    c = Client(daemon)

    restored = texts(c, session_id="A")
    c.call("session.end", session_id="A")
    register(c, "A")
    again = texts(c, session_id="A")
    c.close()

    assert (restored, again) == (["secret"], [])
