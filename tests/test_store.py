"""The store on a real SQLite file: group commit, failure isolation, schema guard."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import anyio
import pytest

from meshd.protocol.errors import StorageUnavailable
from meshd.store import SCHEMA_VERSION, Store, StoreError


async def open_store(path: Path) -> Store:
    st = Store(path)
    await anyio.to_thread.run_sync(st.open)
    st.start()
    return st


class TestGroupCommit:
    async def test_concurrent_writers_share_commits(self, short_tmp: Path) -> None:
        """Many callers waiting at once cost fewer commits than callers."""
        st = await open_store(short_tmp / "s.sqlite3")
        try:
            async with anyio.create_task_group() as tg:
                for i in range(200):
                    tg.start_soon(st.commit, [("meta.set", f"k{i}", i)])
        finally:
            st.stop()
            st.close()
        rows = sqlite3.connect(short_tmp / "s.sqlite3").execute("SELECT count(*) FROM meta")

        assert rows.fetchone()[0] == 200
        assert st.writes == 200
        assert st.commits < 200

    async def test_writes_of_one_loop_turn_share_one_commit(self, short_tmp: Path) -> None:
        """Writes made in the same turn of the event loop reach the writer together: one
        commit, not one per caller (handed over one by one, the writer -- woken at
        once -- committed the first alone and the rest in dribs)."""
        st = await open_store(short_tmp / "s.sqlite3")
        done: list[BaseException | None] = []
        try:
            async with anyio.create_task_group() as tg:
                for i in range(100):  # all start in the same turn
                    tg.start_soon(st.commit, [("meta.set", f"k{i}", i)])
                st.submit([("meta.set", "background", 1)], on_done=done.append)
        finally:
            st.stop()
            st.close()

        assert (st.commits, st.writes) == (1, 101)
        assert done == [None]

    async def test_a_bad_write_fails_only_its_caller(self, short_tmp: Path) -> None:
        """A write that raises (not a storage failure) fails alone; its batch-mates commit."""
        st = await open_store(short_tmp / "s.sqlite3")
        outcome: dict[str, str] = {}

        async def one(name: str, value: int) -> None:
            try:
                await st.commit([("meta.set", name, value)])
                outcome[name] = "ok"
            except StorageUnavailable:
                outcome[name] = "unavailable"

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(one, "good1", 1)
                tg.start_soon(one, "bad", 2**70)  # too large for SQLite INTEGER
                tg.start_soon(one, "good2", 2)
        finally:
            st.stop()
            st.close()

        assert outcome == {"good1": "ok", "bad": "unavailable", "good2": "ok"}


class TestInlineCommit:
    """A lone write its caller waits for is committed on the event loop's thread when the
    writer is idle: the two thread hand-offs cost more than the commit (unpinned, each
    is a wake-up on another CPU). Checkpoints and synced commits stay on the writer."""

    @staticmethod
    def traced(st: Store) -> list[tuple[str, int]]:
        """Every statement the write connection runs, with the thread that ran it."""
        seen: list[tuple[str, int]] = []
        assert st.writer.db is not None
        st.writer.db.set_trace_callback(lambda sql: seen.append((sql, threading.get_ident())))
        return seen

    async def test_a_lone_awaited_write_commits_on_the_loop(self, short_tmp: Path) -> None:
        st = await open_store(short_tmp / "s.sqlite3")
        seen = self.traced(st)
        try:
            await st.commit([("meta.set", "k", 1)])
        finally:
            st.stop()
            st.close()
        commits = [tid for sql, tid in seen if sql == "COMMIT"]

        assert commits == [threading.get_ident()]
        assert (st.commits, st.writes) == (1, 1)

    async def test_a_synced_write_still_goes_to_the_writer(self, short_tmp: Path) -> None:
        from meshd.core.work.ledger import Entry

        st = await open_store(short_tmp / "s.sqlite3")
        seen = self.traced(st)
        try:
            await st.commit([("ledger.put", Entry("daily", "running", "A", 1.0, 1.0))])
        finally:
            st.stop()
            st.close()
        commits = [tid for sql, tid in seen if sql == "COMMIT"]

        assert len(commits) == 1
        assert commits[0] != threading.get_ident()

    async def test_a_write_lock_held_elsewhere_never_stalls_the_loop(self, short_tmp: Path) -> None:
        """Another connection holding SQLite's write lock (a backup, a ``sqlite3`` shell):
        the lone write is not committed on the loop, which would wait there for the busy
        timeout with every request behind it; the writer thread waits instead, and
        commits once the lock is let go."""
        path = short_tmp / "s.sqlite3"
        st = await open_store(path)
        seen = self.traced(st)
        other = sqlite3.connect(path, isolation_level=None)
        done: list[str] = []

        async def write() -> None:
            await st.commit([("meta.set", "k", 1)])
            done.append("committed")

        try:
            other.execute("BEGIN IMMEDIATE")
            async with anyio.create_task_group() as tg:
                tg.start_soon(write)
                await anyio.sleep(0.05)  # a timer: the write runs alone in its turn
                assert done == []
                other.execute("ROLLBACK")
        finally:
            other.close()
            st.stop()
            st.close()
        commits = [tid for sql, tid in seen if sql == "COMMIT"]

        assert done == ["committed"]
        assert len(commits) == 1
        assert commits[0] != threading.get_ident()

    async def test_checkpoints_run_on_the_writer_thread_only(
        self, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The connection never checkpoints by itself (a checkpoint syncs the files, on
        whichever thread commits): the writer checkpoints every few commits."""
        from meshd.store import writer

        monkeypatch.setattr(writer, "CHECKPOINT_COMMITS", 10)
        path = short_tmp / "s.sqlite3"
        st = await open_store(path)
        seen = self.traced(st)
        try:
            for i in range(35):
                await st.commit([("meta.set", f"k{i}", "x" * 3000)])
            await st.flush()
            frames = st.read_now(lambda db: db.execute("SELECT count(*) FROM meta").fetchone())
        finally:
            st.stop()
            st.close()
        here = threading.get_ident()
        checkpoints = [tid for sql, tid in seen if "wal_checkpoint" in sql]
        autocheckpoint = sqlite3.connect(path).execute("PRAGMA wal_autocheckpoint").fetchone()

        assert frames == (35,)
        assert len(checkpoints) >= 3
        assert here not in checkpoints
        assert here in [tid for sql, tid in seen if sql == "COMMIT"]  # commits on the loop
        assert autocheckpoint == (1000,)  # a setting of the daemon's connection, not the file


def test_newer_schema_is_refused(short_tmp: Path) -> None:
    """A database from a newer meshd is refused with a clear message, not touched."""
    path = short_tmp / "new.sqlite3"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.close()

    with pytest.raises(StoreError, match="newer than this meshd"):
        Store(path).open()


class TestSyncedKinds:
    async def test_ledger_writes_commit_with_synchronous_full(self, short_tmp: Path) -> None:
        """SPEC §8: a ledger entry survives power loss -- its batch is committed with
        synchronous=FULL; an ordinary write's is not."""
        from meshd.core.work.ledger import Entry

        st = await open_store(short_tmp / "s.sqlite3")
        seen: list[str] = []
        assert st.writer.db is not None
        st.writer.db.set_trace_callback(seen.append)
        try:
            await st.commit([("meta.set", "k", 1)])
            plain = list(seen)
            seen.clear()
            await st.commit([("ledger.put", Entry("daily", "running", "A", 1.0, 1.0))])
        finally:
            st.stop()
            st.close()

        assert not any("synchronous=FULL" in s for s in plain)
        assert "PRAGMA synchronous=FULL" in seen
        assert seen.index("PRAGMA synchronous=FULL") < seen.index("COMMIT")


async def test_a_clean_close_leaves_no_wal_behind(short_tmp: Path) -> None:
    """The writer closes last, so it folds the WAL into the database and removes it (the
    read-only reader cannot): the next start has no WAL to rebuild and read through."""
    path = short_tmp / "s.sqlite3"
    st = await open_store(path)
    try:
        await st.commit([("meta.set", f"k{i}", "x" * 1000) for i in range(200)])
        assert st.read_now(lambda db: db.execute("SELECT count(*) FROM meta").fetchone()[0]) == 200
        assert path.with_name("s.sqlite3-wal").stat().st_size > 0
    finally:
        st.stop()
        st.close()

    assert not path.with_name("s.sqlite3-wal").exists()
    reopened = sqlite3.connect(path)
    assert reopened.execute("SELECT count(*) FROM meta").fetchone()[0] == 200
    reopened.close()


async def test_a_failing_on_done_wakes_the_rest_of_its_batch(short_tmp: Path) -> None:
    """One caller's ``on_done`` that raises (a bug in what it tells) is logged; the
    callers after it in the same batch are still woken (they waited forever: every
    request whose write shared that commit lost its reply)."""
    st = await open_store(short_tmp / "s.sqlite3")

    def boom(error: BaseException | None) -> None:
        raise RuntimeError("a bug in what a commit tells")

    try:
        with anyio.fail_after(10):  # a hang fails the test instead of hanging it
            st.submit([("meta.set", "first", 1)], on_done=boom)  # same turn: one batch
            await st.commit([("meta.set", "second", 2)])
    finally:
        st.stop()
        st.close()

    assert (st.commits, st.writes) == (1, 2)


class TestSessionRecords:
    """A session is stored without its default-valued fields (bench: daemon start), so
    the defaults are part of the stored format."""

    def test_defaults_are_pinned(self) -> None:
        """A record written by an older meshd without a field reads back with today's
        default: changing one would change what every stored session means."""
        from meshd.core.sessions.records import Session

        fields, values = Session.__struct_fields__, Session.__struct_defaults__
        defaults = dict(zip(fields[len(fields) - len(values) :], values, strict=True))

        assert defaults == {
            "task": "", "status": "idle", "model": "", "provider": "", "pid": None,
            "pid_start": None, "host": "", "cwd": None, "repo": None, "branch": None,
            "worktree": None, "tools": (), "parent": None, "slot": None, "kanban_task": None,
            "accept_queries": True, "accept_messages": True, "liveness": "heartbeat",
            "expire_after": None, "bind": False, "started_at": 0.0, "last_heartbeat": 0.0,
            "last_activity": 0.0, "last_hb_mono": 0.0, "grace_until": 0.0,
            "unbound_at": None, "conn_id": None, "anchors": (), "rank": 0, "rank_by": None,
            "rank_at": None, "activity": "", "reg": "",
        }  # fmt: skip

    async def test_a_session_reads_back_whole_from_its_short_record(self, short_tmp: Path) -> None:
        """Written without its defaults, read back equal; a full record (as meshd wrote
        before) still reads back too."""
        import msgspec

        from meshd.core.sessions.records import Session
        from meshd.store.sessions import load_sessions

        s = Session(
            session_id="cli:a", profile="p", source="cli", task="t", cwd="/srv", bind=True,
            tools=("Edit",), anchors=((12, None),), started_at=5.0,
        )  # fmt: skip
        full = Session(session_id="cli:b", profile="p", source="cli", accept_queries=False)
        st = await open_store(short_tmp / "s.sqlite3")
        try:
            await st.commit([("session.put", s)])
        finally:
            st.stop()
            st.close()
        db = sqlite3.connect(short_tmp / "s.sqlite3")
        old = msgspec.json.encode(msgspec.structs.asdict(full))
        db.execute(
            "INSERT INTO sessions(session_id, record, started_at) VALUES (?, ?, 0)", ("cli:b", old)
        )
        db.commit()
        (record,) = db.execute("SELECT record FROM sessions WHERE session_id='cli:a'").fetchone()

        assert msgspec.json.decode(record) == {
            "session_id": "cli:a", "profile": "p", "source": "cli", "task": "t", "cwd": "/srv",
            "tools": ["Edit"], "bind": True, "started_at": 5.0, "anchors": [[12, None]],
        }  # fmt: skip
        assert sorted(load_sessions(db), key=lambda x: x.session_id) == [s, full]
        db.close()


async def test_stop_closes_the_bell_and_wakes_every_batch(short_tmp: Path) -> None:
    """The writer hands finished batches back through a pipe the loop watches (its
    bell); every caller is woken, in order, and stopping the store closes the pipe
    (a daemon that restarts its store in-process must not leak descriptors)."""
    before = set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()
    st = await open_store(short_tmp / "s.sqlite3")
    order: list[int] = []

    async def write(i: int) -> None:
        await st.commit([("meta.set", f"k{i}", i)])
        order.append(i)

    try:
        for i in range(50):  # one by one: a batch each, each rung and woken
            await write(i)
        async with anyio.create_task_group() as tg:
            for i in range(50, 250):
                tg.start_soon(write, i)
    finally:
        st.stop()
        st.close()

    assert order[:50] == list(range(50))
    assert sorted(order) == list(range(250))
    if before:
        assert set(os.listdir("/proc/self/fd")) <= before


def test_the_contract_names_the_schema_version_the_store_writes() -> None:
    """``meshctl doctor`` reads the schema version from the contract, not the store: the
    two agree (add a migration, raise ``contract.SCHEMA_VERSION``)."""
    from meshd.protocol import contract

    assert contract.SCHEMA_VERSION == SCHEMA_VERSION
