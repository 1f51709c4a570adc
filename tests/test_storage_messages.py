"""Message storage: the DDL, the writers through the real store, and the read helpers."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from meshd.core.clock import ManualClock
from meshd.core.mail.mailbox import Mailbox
from meshd.core.mail.records import Handoff, Message, item_of
from meshd.core.sessions.registry import Registration, Registry
from meshd.core.settings import Settings
from meshd.store import Store
from meshd.store import messages as sm

DAY = 86400.0


@pytest.fixture
def db_path() -> Iterator[Path]:
    """A fresh database file (its migrations include the message tables)."""
    d = Path(tempfile.mkdtemp(prefix="msg-"))
    yield d / "test.sqlite3"
    shutil.rmtree(d, ignore_errors=True)


async def commit(path: Path, writes: list[tuple[Any, ...]]) -> None:
    """Open the store, commit ``writes`` through its writer thread, close it."""
    st = Store(path)
    await anyio.to_thread.run_sync(st.open)
    try:
        st.start()
        await st.commit(writes)
    finally:
        st.stop()
        st.close()


def read(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path)


def msg(i: int, to: str = "b", sender: str = "a", **kw: Any) -> Message:
    base: dict[str, Any] = dict(
        id=i, to=to, sender=sender, kind="message", text=f"text {i}", created_at=1000.0 + i
    )
    base.update(kw)
    return Message(**base)


def session_row(sid: str, ended: bool) -> tuple[Any, ...]:
    return (sid, b"{}", 0.0, 1.0 if ended else None)


class TestSchema:
    async def test_tables_are_strict(self, db_path: Path) -> None:
        """Both tables are STRICT, so a wrong type is refused, not stored."""
        await commit(db_path, [])
        with read(db_path) as db:
            sql = dict(db.execute("SELECT name, sql FROM sqlite_master WHERE type='table'"))
            with pytest.raises(sqlite3.IntegrityError):
                db.execute(
                    "INSERT INTO messages(id, to_session, from_session, kind, text, created_at,"
                    " state) VALUES (1, 'b', 'a', 'message', 'x', 'not a number', 'queued')"
                )

        assert sql["messages"].rstrip().endswith("STRICT")
        assert sql["handoffs"].rstrip().endswith("STRICT")

    async def test_inbox_reads_use_an_index(self, db_path: Path) -> None:
        """The inbox page query walks an index on (to_session, id), not the table."""
        await commit(db_path, [])
        with read(db_path) as db:
            plan = " ".join(
                str(r[-1])
                for r in db.execute(
                    "EXPLAIN QUERY PLAN SELECT id FROM messages WHERE to_session = ? AND id < ?"
                    " ORDER BY id DESC LIMIT 10",
                    ("b", 99),
                )
            )

        assert "INDEX messages_inbox" in plan or "INDEX messages_unread" in plan


class TestMessages:
    async def test_put_then_inbox_page_newest_first(self, db_path: Path) -> None:
        """Stored items come back newest first, framed, with their sender."""
        await commit(db_path, [("message.put", msg(1)), ("message.put", msg(2))])
        with read(db_path) as db:
            page = sm.inbox_page(db, "b")
            older = sm.inbox_page(db, "b", before=2)

        assert [p.id for p in page] == [2, 1]
        assert [p.id for p in older] == [1]
        assert page[0].sender == "a"
        assert page[0].created_at == 1002.0
        assert "not from the user" in item_of(page[0]).framing  # the wire shape frames it

    async def test_states_move_forward_only(self, db_path: Path) -> None:
        """delivered then read sets both times; a later 'delivered' cannot undo 'read'."""
        await commit(
            db_path,
            [
                ("message.put", msg(1)),
                ("message.state", 1, "delivered", 2000.0),
                ("message.state", 1, "read", 2001.0),
                ("message.state", 1, "delivered", 2002.0),
            ],
        )
        with read(db_path) as db:
            row = db.execute("SELECT state, delivered_at, read_at FROM messages").fetchone()

        assert row == ("read", 2000.0, 2001.0)

    async def test_read_straight_from_queued_fills_delivered_at(self, db_path: Path) -> None:
        """An inbox read without peek goes queued → read; delivered_at is set too."""
        await commit(db_path, [("message.put", msg(1)), ("message.state", 1, "read", 2001.0)])
        with read(db_path) as db:
            row = db.execute("SELECT delivered_at, read_at FROM messages").fetchone()

        assert row == (2001.0, 2001.0)

    async def test_states_are_reported_to_the_sender_only(self, db_path: Path) -> None:
        """A sender sees where its own messages are; others' ids are left out."""
        await commit(db_path, [("message.put", msg(1)), ("message.put", msg(2, sender="c"))])
        with read(db_path) as db:
            states = sm.message_states(db, "a", [1, 2])
            parties = sm.message_parties(db, 2)

        assert states == {1: "queued"}
        assert parties == ("c", "b")

    async def test_prune(self, db_path: Path) -> None:
        """Old read items and old items of ended sessions go; the rest stays."""
        rows = [
            msg(1, state="read"),  # old, read: pruned
            msg(2),  # old, unread, live session: kept
            msg(3, to="gone"),  # old, unread, ended session: pruned
            msg(4, to="never"),  # old, unread, unknown session: pruned
            msg(5, state="read", created_at=5000.0),  # recent, read: kept
        ]
        await commit(db_path, [("message.put", m) for m in rows])
        with read(db_path) as db:
            db.executemany(
                "INSERT INTO sessions(session_id, record, started_at, ended_at)"
                " VALUES (?, ?, ?, ?)",
                [session_row("b", ended=False), session_row("gone", ended=True)],
            )
        await commit(db_path, [("message.prune", 4000.0)])
        with read(db_path) as db:
            left = [r[0] for r in db.execute("SELECT id FROM messages ORDER BY id")]

        assert left == [2, 5]


def broadcast_items() -> list[Message]:
    """A broadcast's items as the mailbox makes them (one queued, the rest delivered at
    once to a subscriber), and some that changed since or never shared its shape."""
    at = 1796000000.123456789  # a time with every bit of a double in use
    shared = dict(sender="a", kind="broadcast", text='rebasing "main" — ünïcode\n', created_at=at)
    items = [
        Message(id=10 + i, to=f"s{i}", state="delivered", delivered_at=at, **shared)  # type: ignore[arg-type]
        for i in range(6)
    ]
    items[1] = Message(id=11, to='odd "sid" \\ é', **shared)  # type: ignore[arg-type]
    items[2].state, items[2].read_at = "read", at + 1  # read before the writer ran
    items[3].delivered_at = at + 0.5
    items[4] = Message(id=14, to="s4", sender="a", kind="broadcast", text="other", created_at=at)
    return items


ALL_COLUMNS = "SELECT *, typeof(created_at), typeof(delivered_at), typeof(read_at) FROM messages"


class TestPutMany:
    @pytest.mark.parametrize("json_rows", [True, False], ids=["json_each", "row_by_row"])
    async def test_the_same_rows_as_one_put_each(
        self, db_path: Path, json_rows: bool, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``message.put_many`` stores exactly the rows one ``message.put`` each would:
        every column bit for bit (times stay REAL, never rounded through JSON text), odd
        items included, with or without SQLite's JSON functions."""
        monkeypatch.setattr(sm.SQLITE, "json_each", json_rows)
        each = db_path.with_name("each.sqlite3")
        await commit(db_path, [("message.put_many", tuple(broadcast_items()))])
        await commit(each, [("message.put", m) for m in broadcast_items()])
        with read(db_path) as db, read(each) as db_each:
            rows = db.execute(ALL_COLUMNS + " ORDER BY id").fetchall()
            rows_each = db_each.execute(ALL_COLUMNS + " ORDER BY id").fetchall()

        assert len(rows) == 6
        assert rows == rows_each
        assert [r[0] for r in rows] == list(range(10, 16))

    async def test_a_broadcast_restores_as_it_was(self, db_path: Path) -> None:
        """Stored in one statement, each item comes back to its own session's inbox,
        with its own id, state and time."""
        items = broadcast_items()
        await commit(db_path, [("message.put_many", tuple(items))])
        with read(db_path) as db:
            back = {m.id: m for m in sm.restore(db, items[0].created_at).messages}

        unread = [m for m in items if m.state != "read"]
        assert [back[m.id] for m in unread] == unread


class TestHandoffs:
    async def test_list_mine_and_unaddressed_or_all(self, db_path: Path) -> None:
        """``handoff list`` shows to-me, by-me and unaddressed; ``all`` shows every one."""
        hs = [
            Handoff(1, "a", None, "open", created_at=1.0),
            Handoff(2, "a", "b", "for b", files=("x.py",), next_steps=("test",), created_at=2.0),
            Handoff(3, "c", "d", "private-ish", created_at=3.0),
            Handoff(4, "b", "c", "by b", created_at=4.0),
        ]
        await commit(db_path, [("handoff.put", h) for h in hs])
        with read(db_path) as db:
            mine = sm.handoff_list(db, "b")
            every = sm.handoff_list(db, "b", every=True)
            shown = sm.handoff_show(db, 2)
            missing = sm.handoff_show(db, 99)

        assert [h.id for h in mine] == [4, 2, 1]
        assert [h.id for h in every] == [4, 3, 2, 1]
        assert shown is not None
        assert (shown.files, shown.next_steps, shown.sender) == (("x.py",), ("test",), "a")
        assert missing is None


class TestRestore:
    async def test_round_trip_into_a_new_mailbox(self, db_path: Path) -> None:
        """What one mailbox stored, a new one restores: unread items, ids, handoffs."""
        clock = ManualClock()
        settings = Settings()
        registry = Registry(clock, settings, "p")
        for sid in ("a", "b"):
            registry.register(_reg(sid))
        first = Mailbox(clock, settings, registry)
        kept = first.send("a", "b", "still unread")
        gone = first.send("a", "b", "read already")
        first.inbox("b", peek=True)
        first.ack("b", [gone.id])
        first.write_handoff("a", "notes")
        await commit(db_path, first.drain()[0])

        with read(db_path) as db:
            restored = sm.restore(db, clock.now())
        second = Mailbox(clock, settings, registry)
        second.restore(
            restored.messages,
            restored.handoffs,
            max_message_id=restored.max_message_id,
            max_handoff_id=restored.max_handoff_id,
        )

        assert [m.id for m in second.unread("b")] == [kept.id]
        assert second.unread("b")[0].state == "delivered"
        assert [m.text for m in restored.messages if m.id == gone.id] == [""]
        assert second.send("a", "b", "new").id == gone.id + 1
        assert "notes" in second.status_text("a", "b")

    async def test_latest_handoff_per_pair(self, db_path: Path) -> None:
        """Restore brings back only each (from, to) pair's latest handoff."""
        hs = [
            Handoff(1, "a", None, "old"),
            Handoff(2, "a", None, "new"),
            Handoff(3, "a", "b", "to b"),
        ]
        await commit(db_path, [("handoff.put", h) for h in hs])
        with read(db_path) as db:
            restored = sm.restore(db, 0.0)

        assert [h.id for h in restored.handoffs] == [2, 3]
        assert restored.max_handoff_id == 3


def _reg(sid: str) -> Registration:
    return Registration(
        session_id=sid, source="cli", task="", status="idle", model="", provider="",
        pid=None, pid_start=None, host="h", cwd=None, repo=None, branch=None, worktree=None,
        tools=[], parent=None, slot=None, kanban_task=None, accept_queries=None,
        accept_messages=None, liveness="heartbeat", expire_after=None, bind=False, conn_id=None,
    )  # fmt: skip
