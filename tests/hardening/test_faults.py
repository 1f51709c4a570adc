"""Storage faults with real parts: a full disk and a read-only state folder.

The state folder is a small tmpfs mounted for the test (root only: skipped with the
reason otherwise). SPEC §8: when the database cannot be written the daemon
acknowledges nothing it could not store (``UNAVAILABLE``) and keeps serving reads;
once space is back, writes work again. A corrupt database is covered by
tests/integration/test_daemon.py.
"""

from __future__ import annotations

import errno
import json
import os
import select
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import DaemonHandle, MeshEnv
from tests.hardening.support import ping, session_ids
from tests.support import Client, wait_for

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="mounting a tmpfs as the state folder needs root"
)


def mount(*args: str) -> None:
    out = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        pytest.skip(f"mount {' '.join(args)} failed here: {out.stderr.strip()}")


@pytest.fixture
def small_state(mesh_env: MeshEnv) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted as the profile's state folder, unmounted afterwards."""
    state = mesh_env.state_dir
    state.mkdir(mode=0o700)
    mount("-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(state))
    yield state
    subprocess.run(["umount", "-l", str(state)], check=False)


def fill(folder: Path) -> Path:
    """Write a file until the filesystem says ENOSPC; return it (delete it to free space).

    Unbuffered writes: a buffered file would raise ENOSPC again when closed.
    """
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (65536, 512, 1):  # then top up the last partial blocks
            block = b"\0" * size
            try:
                while True:
                    os.write(fd, block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)
    return filler


BIG = "/" + "x" * 4000


def register(c: Client, sid: str, *, big: bool = False) -> dict[str, object]:
    """Register ``sid``; ``big`` fills four 4 KiB path fields so the WAL grows fast."""
    params: dict[str, object] = {"session_id": sid}
    if big:
        params |= {"cwd": BIG, "repo": BIG, "worktree": BIG, "branch": BIG}
    return c.call("session.register", params)  # type: ignore[no-any-return]


class TestDiskFull:
    def test_unavailable_and_nothing_kept_then_recovers(
        self, mesh_env: MeshEnv, small_state: Path
    ) -> None:
        """Disk full: UNAVAILABLE, the refused session is not listed, reads work; then writes again."""
        d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=small_state)
        d.start()
        try:
            with Client(d.socket) as c:
                assert "result" in register(c, "before")
                filler = fill(small_state)
                # The WAL may still have room in pages it already owns: keep writing
                # (big records) until the database really cannot grow.
                acked, refused = ["before"], []
                for i in range(2000):
                    r = register(c, f"s{i}", big=True)
                    if "result" in r:
                        acked.append(f"s{i}")
                        continue
                    assert r["error"]["data"]["code"] == "UNAVAILABLE", r  # type: ignore[index]
                    refused.append(f"s{i}")
                    if len(refused) >= 3:
                        break
                listed = session_ids(d.socket)
                info = c.call("mesh.info")
                filler.unlink()
                after = wait_for(lambda: "result" in register(c, "after-free"))

            assert len(refused) == 3
            assert not (set(refused) & listed)
            assert set(acked) <= listed
            assert "result" in info
            assert after
            d.kill()
            d.start()
            assert set(acked) | {"after-free"} <= session_ids(d.socket)
            assert not (set(refused) & session_ids(d.socket))
        finally:
            d.stop()

    @staticmethod
    def ends_on_a_full_disk(
        mesh_env: MeshEnv, state: Path
    ) -> tuple[dict[str, bool], set[str], set[str]]:
        """Register 50, fill the disk, end them all: (acknowledged?, listed, restored)."""
        d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=state)
        d.start()
        try:
            with Client(d.socket) as c:
                for i in range(50):
                    assert "result" in register(c, f"e{i}", big=True)
                filler = fill(state)
                acked = {}
                for i in range(50):
                    r = c.call("session.end", {"session_id": f"e{i}"})
                    acked[f"e{i}"] = "result" in r
                    if "result" not in r:
                        assert r["error"]["data"]["code"] == "UNAVAILABLE", r
                listed = session_ids(d.socket)
                filler.unlink()
            d.kill()
            d.start()
            return acked, listed, session_ids(d.socket)
        finally:
            d.stop()

    def test_refused_end_is_not_stored(self, mesh_env: MeshEnv, small_state: Path) -> None:
        """An end told UNAVAILABLE was not stored: after a restart the session is back."""
        acked, _listed, restored = self.ends_on_a_full_disk(mesh_env, small_state)
        refused = {sid for sid, ok in acked.items() if not ok}

        assert refused
        assert refused <= restored
        assert not ({sid for sid, ok in acked.items() if ok} & restored)

    def test_refused_end_is_not_applied(self, mesh_env: MeshEnv, small_state: Path) -> None:
        """An end that was not acknowledged has no effect: the session stays listed."""
        acked, listed, _restored = self.ends_on_a_full_disk(mesh_env, small_state)
        refused = {sid for sid, ok in acked.items() if not ok}

        assert refused
        assert refused <= listed

    @staticmethod
    def claim_and_message_on_a_full_disk(mesh_env: MeshEnv, state: Path) -> dict[str, Any]:
        """Fill the disk, then a claim and a message; what each call answered."""
        d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=state)
        d.start()
        key = f"file:{state}/contended"
        out: dict[str, Any] = {"key": key}
        try:
            with Client(d.socket) as c:
                assert "result" in register(c, "a")
                assert "result" in register(c, "b")
                filler = fill(state)
                for i in range(2000):  # use up what room the WAL still has
                    if "error" in register(c, f"pad{i}", big=True):
                        break
                out["claim"] = c.call("claim.acquire", {"session_id": "a", "resources": [key]})
                out["msg"] = c.call("message.send", {"session_id": "a", "to": "b", "text": "hi"})
                out["holders"] = c.call("claim.list")["result"]["claims"]
                out["inbox"] = c.call(
                    "message.inbox", {"session_id": "b", "all": True, "peek": True}
                )["result"]["items"]
                filler.unlink()
                out["other"] = c.call("claim.acquire", {"session_id": "b", "resources": [key]})
            return out
        finally:
            d.stop()

    def test_refused_message_is_not_delivered(self, mesh_env: MeshEnv, small_state: Path) -> None:
        """Disk full: a message told UNAVAILABLE is not in the recipient's inbox."""
        out = self.claim_and_message_on_a_full_disk(mesh_env, small_state)

        assert out["msg"]["error"]["data"]["code"] == "UNAVAILABLE", out["msg"]
        assert out["inbox"] == []

    def test_refused_claim_is_not_held(self, mesh_env: MeshEnv, small_state: Path) -> None:
        """Disk full: a claim told UNAVAILABLE is not held, and another session gets it later."""
        out = self.claim_and_message_on_a_full_disk(mesh_env, small_state)

        assert out["claim"]["error"]["data"]["code"] == "UNAVAILABLE", out["claim"]
        assert not [h for h in out["holders"] if h["resource"] == out["key"]]
        assert out["other"]["result"]["status"] == "granted"

    def test_snapshot_refused_on_a_full_disk_is_written_later(
        self, mesh_env: MeshEnv, small_state: Path
    ) -> None:
        """A task changed while the disk was full is stored once space is back (not lost)."""
        mesh_env.write_config("[defaults]\nsnapshot_interval = 0.05\n")
        d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=small_state)
        d.start()
        try:
            with Client(d.socket) as c:
                assert "result" in register(c, "snap")
                filler = fill(small_state)
                for i in range(2000):  # use up what room the WAL still has
                    if "error" in register(c, f"pad{i}", big=True):
                        break
                hb = {"session_id": "snap", "task": "changed while full"}
                assert "result" in c.call("session.heartbeat", hb)
                # the sweeper tries the snapshot and fails (logged), then space comes back
                wait_for(lambda: d.logs().count("commit failed") >= 2)
                filler.unlink()
                assert "result" in register(c, "after")
            assert d.stop() == 0
            d.start()
            with Client(d.socket) as c:
                task = c.call("session.get", {"session_id": "snap"})["result"]["task"]

            assert task == "changed while full"
        finally:
            d.stop()


def _answers(path: Path) -> bool:
    try:
        return ping(path)
    except OSError:  # no socket yet, or one a refusing start leaves
        return False


class TestReadOnly:
    def test_read_only_state_folder(self, mesh_env: MeshEnv, small_state: Path) -> None:
        """A state folder that turned read-only: the daemon says so clearly; nothing is lost.

        A tmpfs cannot be remounted read-only while meshd holds its files open for
        writing (the kernel answers EBUSY), so the folder turns read-only between two
        runs. Today meshd refuses to start ("cannot take the profile lock …: Read-only
        file system"); serving reads with UNAVAILABLE writes would also do.
        """
        d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=small_state)
        d.start()
        with Client(d.socket) as c:
            assert "result" in register(c, "kept")
        d.stop()
        mount("-o", "remount,ro", str(small_state))
        try:
            d.start(wait=False)
            proc = d.proc
            assert proc is not None
            # it refuses (exits) or serves (answers), however long a loaded machine takes
            wait_for(
                lambda: proc.poll() is not None or _answers(d.socket), what="refused or served"
            )
            code = proc.poll()
            if code is None:  # it serves: reads work, writes are UNAVAILABLE
                assert "kept" in session_ids(d.socket)
                with Client(d.socket) as c:
                    r = register(c, "new")
                assert r["error"]["data"]["code"] == "UNAVAILABLE", r  # type: ignore[index]
            else:  # it refuses to start, saying why, without a traceback
                assert code != 0
                assert "read-only" in d.logs().lower() or "readonly" in d.logs().lower()
                assert "Traceback" not in d.logs()
        finally:
            d.stop()
            mount("-o", "remount,rw", str(small_state))
        d.start()
        assert "kept" in session_ids(d.socket)
        d.stop()


# --- nothing refused takes effect: every mutating method, memory against disk ---------

# What each method is, for this audit. A method the daemon serves that is in none of
# these sets fails the test: decide where it belongs (and, if it stores, refuse it here).
READ_ONLY = {
    "mesh.ping", "mesh.info", "mesh.schema", "session.list", "session.get", "claim.check",
    "claim.list", "claim.validate", "audit.log", "message.status", "handoff.list",
    "handoff.show", "board.changes", "notes.list", "signal.wait", "board.show",
    "once.list",  # stores only what it finds: a dead runner's key turned unknown
    "job.get", "job.list",
    "fleet.status",
}  # fmt: skip
NOT_STORED = {  # change only what a restart forgets anyway (SPEC §8: not durable)
    "session.heartbeat",  # reported fields are snapshots, liveness is re-granted
    "mesh.reload",  # re-reads config.toml
    "query.ask",  # asks are waits; the status answer stores nothing
    "query.respond",  # a responder counts while its connection is open
    "events.subscribe",
    "job.wait",  # a wait
    "mesh.watch",  # a subscription to mesh.changed events
}


def _acquire(rid: int, sid: str, keys: list[str], wait: float) -> bytes:
    params = {"session_id": sid, "resources": keys, "wait": wait}
    req = {"jsonrpc": "2.0", "id": rid, "method": "claim.acquire", "params": params}
    return json.dumps(req).encode() + b"\n"


def _waiting(c: Client) -> set[str]:
    return {w["session_id"] for w in c.call("claim.list")["result"]["waiting"]}


def _answered(c: Client) -> bool:
    return bool(select.select([c.sock], [], [], 0)[0])


def key_in(state: Path, name: str) -> str:
    return f"file:{state}/{name}"


def refused_calls(state: Path, answer_query: int) -> list[tuple[str, dict[str, Any]]]:
    """One call of every mutating method, each of which must store something."""
    k1, k2 = key_in(state, "k1"), key_in(state, "k2")
    return [
        ("session.register", {"session_id": "new", "cwd": BIG}),
        (
            "session.register",
            {
                "session_id": "c",
                "task": "refreshed",
                "liveness": "process",
                "pid": os.getpid(),
                "replace": True,  # c beats with no process: a process takes it only so
            },
        ),
        ("session.end", {"session_id": "b"}),
        ("session.attach", {"session_id": "c", "pid": os.getpid()}),
        ("claim.acquire", {"session_id": "c", "resources": [k2]}),
        ("claim.release", {"session_id": "a", "resources": [k1]}),
        ("claim.steal", {"session_id": "c", "resources": [k1], "reason": "urgent"}),
        ("message.send", {"session_id": "a", "to": "b", "text": "refused"}),
        ("message.inbox", {"session_id": "b"}),
        ("message.ack", {"session_id": "b", "ids": [1]}),
        ("query.answer", {"session_id": "b", "query_id": answer_query, "text": "late"}),
        ("broadcast.send", {"session_id": "a", "text": "everyone"}),
        ("handoff.write", {"session_id": "a", "summary": "done", "to": "b"}),
        ("handoff.request", {"session_id": "a", "to": "c", "timeout": 1}),
        ("board.changed", {"session_id": "a", "paths": [f"{state}/f.py"]}),
        ("session.prioritize", {"session_id": "a", "rank": 9, "by": "ana"}),
        ("claim.preempt", {"session_id": "c", "resources": [k1], "reason": "mine"}),
        ("session.pause", {"session_id": "a", "note": "checkpoint"}),
        ("session.resume", {"session_id": "b"}),
        ("notes.add", {"session_id": "a", "text": "refused", "private": True}),
        ("notes.remove", {"session_id": "a", "id": 1}),  # "kept", the first note
        ("signal.emit", {"session_id": "a", "name": "s", "payload": "refused"}),
        ("once.reserve", {"session_id": "c", "key": "new"}),
        ("once.finish", {"session_id": "a", "key": "running", "outcome": "done"}),
        ("once.resolve", {"key": "done", "state": "free"}),
        (
            "board.post",
            {"session_id": "a", "kind": "pitfall", "text": "no", "project_or_path": "f"},
        ),
        ("board.touch", {"session_id": "a", "paths": [f"{state}/read.py"]}),
        ("board.watch", {"session_id": "a", "paths": [f"{state}/src"]}),
        ("job.start", {"name": "nightly", "session_id": "a"}),
        ("job.end", {"name": "nightly", "session_id": "b", "exit": 0}),
        ("job.defer", {"name": "nightly", "session_id": "c", "holders": []}),
    ]


def result(c: Client, method: str, params: dict[str, Any] | None = None) -> Any:
    reply = c.call(method, params)
    assert "result" in reply, (method, params, reply)
    return reply["result"]


def mesh_view(c: Client) -> dict[str, Any]:
    """What the daemon says it holds: sessions and pids, claims and tokens, inboxes,
    handoffs (read from the database) and the board's rows."""
    sessions = result(c, "session.list")["sessions"]
    sids = sorted(s["session_id"] for s in sessions)
    claims = result(c, "claim.list")["claims"]
    inboxes = {}
    for sid in ("a", "b", "c"):
        items = result(c, "message.inbox", {"session_id": sid, "peek": True})["items"]
        inboxes[sid] = sorted((i["id"], i["state"]) for i in items)
    handoffs = result(c, "handoff.list", {"all": True})["handoffs"]
    return {
        "sessions": sids,
        "pids": {s["session_id"]: s["pid"] for s in sessions},
        "ranks": {s["session_id"]: s.get("rank", 0) for s in sessions if s.get("rank")},
        "paused": sorted(s["session_id"] for s in sessions if s["status"] == "paused"),
        "fields": {s["session_id"]: (s["task"], s["liveness"]) for s in sessions},
        "claims": sorted((x["session_id"], x["resource"], x["token"]) for x in claims),
        "inboxes": inboxes,
        "handoffs": sorted(h["id"] for h in handoffs),
        "board": c.call("board.changes", {})["result"]["entries"],
        "notes": [
            n["text"] for n in c.call("notes.list", {"session_id": "a"})["result"]["entries"]
        ],
        "signal": c.call("signal.wait", {"name": "s", "timeout": 0})["result"]["last_seq"],
        "ledger": [(e["key"], e["state"]) for e in c.call("once.list")["result"]["entries"]],
        "whole board": c.call("board.show", {"project_or_path": "f"})["result"],
        "jobs": c.call("job.list", {})["result"]["jobs"],
    }


class TestNothingRefusedTakesEffect:
    def test_every_mutating_method_refused_changes_nothing(
        self, mesh_env: MeshEnv, small_state: Path
    ) -> None:
        """Each mutating method refused by a full disk: UNAVAILABLE, and what the daemon
        shows afterwards (memory) is what it restores after kill -9 (disk), unchanged
        from before the refusals."""
        mesh_env.write_config('[jobs.nightly]\nresources = ["res:nightly"]\ncritical = true\n')
        d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=small_state)
        d.start()
        try:
            served = set(d.call("mesh.schema")["result"]["methods"])
            with Client(d.socket) as c, Client(d.socket) as responder:
                for sid in ("a", "b", "c"):
                    assert "result" in register(c, sid)
                assert "result" in c.call(
                    "claim.acquire", {"session_id": "a", "resources": [key_in(small_state, "k1")]}
                )
                assert "result" in c.call(
                    "message.send", {"session_id": "a", "to": "b", "text": "m"}
                )
                c.call("message.inbox", {"session_id": "b", "peek": True})  # delivered, not read
                c.call("notes.add", {"session_id": "a", "text": "kept"})
                c.call("signal.emit", {"name": "s"})
                for key in ("running", "done"):
                    c.call("once.reserve", {"session_id": "a", "key": key})
                c.call("once.finish", {"session_id": "a", "key": "done", "outcome": "done"})
                responder.call("query.respond", {"session_id": "b"})
                ask = c.call(
                    "query.ask", {"session_id": "a", "to": "b", "question": "?", "timeout": 0.1}
                )
                query_id = ask["result"]["query_id"]
                responder.sock.settimeout(0.5)  # the query event, not read: b answers late
                # c out-ranks a (so its preempt would ask); b is paused (so resume would act)
                assert "result" in c.call("session.prioritize", {"session_id": "c", "rank": 5})
                assert "result" in c.call("session.pause", {"session_id": "b", "note": "n"})
                before = mesh_view(c)

                filler = fill(small_state)
                for i in range(2000):  # use up what room the WAL still has
                    if "error" in register(c, f"pad{i}", big=True):
                        break
                padded = mesh_view(c)
                calls = refused_calls(small_state, query_id)
                answers = [(method, c.call(method, params)) for method, params in calls]
                during = mesh_view(c)
                filler.unlink()
            d.kill()
            d.start()
            with Client(d.socket) as c:
                after = mesh_view(c)
        finally:
            d.stop()

        assert served == READ_ONLY | NOT_STORED | {m for m, _ in calls}, "audit this method"
        refused = [(m, a.get("error", {}).get("data", {}).get("code")) for m, a in answers]
        assert refused == [(m, "UNAVAILABLE") for m, _ in answers], answers
        pads = [s for s in padded["sessions"] if s.startswith("pad")]
        assert before == {
            **padded,
            "sessions": sorted(set(padded["sessions"]) - set(pads)),
            "pids": {k: v for k, v in padded["pids"].items() if k not in pads},
            "fields": {k: v for k, v in padded["fields"].items() if k not in pads},
        }
        assert during == padded  # memory: nothing refused took effect
        assert after == padded  # disk: the same

    def test_a_wait_that_runs_out_is_held_though_what_it_let_go_was_refused(
        self, mesh_env: MeshEnv, small_state: Path
    ) -> None:
        """a waits for {k1, k2} (k1 held), b for {k2} behind it; the disk is full when a's
        wait runs out. b's grant, set off by a's withdrawal, is refused (UNAVAILABLE, b
        holds nothing), and a is answered ``held``: its outcome was known whatever that
        commit did (it was answered UNAVAILABLE)."""
        d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=small_state)
        d.start()
        waits = (0.5, 1.0, 2.0, 4.0, 8.0)  # a longer wait if a ran out before b queued
        ones = [key_in(small_state, f"one{n}") for n in range(len(waits))]
        out: dict[str, Any] = {}
        try:
            with Client(d.socket) as c:
                for sid in ("holder", "a", "b"):
                    assert "result" in register(c, sid)
                assert "result" in c.call(
                    "claim.acquire", {"session_id": "holder", "resources": ones}
                )
                fill(small_state)
                for i in range(2000):  # use up what room the WAL still has
                    if "error" in register(c, f"pad{i}", big=True):
                        break
                for k1, wait in zip(ones, waits, strict=True):
                    k2 = k1.replace("one", "two")
                    with Client(d.socket) as a, Client(d.socket) as b:
                        a.send(_acquire(1, "a", [k1, k2], wait))
                        wait_for(lambda: "a" in _waiting(c) or _answered(a))
                        b.send(_acquire(1, "b", [k2], 60))
                        wait_for(lambda: "b" in _waiting(c) or _answered(b))
                        if _answered(b):  # a ran out first: b was not behind it, a miss
                            continue
                        out = {"a": a.reply(), "b": b.reply(), "k2": k2}
                        break
                assert out, "a's wait always ran out before b queued behind it"
                out["holders"] = [
                    x["session_id"] for x in c.call("claim.list")["result"]["claims"]
                    if x["resource"] == out["k2"]
                ]  # fmt: skip
        finally:
            d.stop()

        assert out["a"]["result"]["status"] == "held", out["a"]
        assert out["b"]["error"]["data"]["code"] == "UNAVAILABLE", out["b"]
        assert out["holders"] == []

    @staticmethod
    def holders_after_recovery(
        mesh_env: MeshEnv, state: Path, refuse: tuple[str, dict[str, Any]] | None, ttl: float | None
    ) -> dict[str, Any]:
        """``a`` holds a key; the disk fills; ``refuse`` is called (or a ttl runs out);
        space comes back; ``b`` tries the key; kill -9 and restart: who holds it."""
        d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=state)
        d.start()
        key = key_in(state, "k")
        out: dict[str, Any] = {}
        try:
            with Client(d.socket) as c:
                assert "result" in register(c, "a")
                assert "result" in register(c, "b")
                params: dict[str, Any] = {"session_id": "a", "resources": [key]}
                if ttl is not None:
                    params["ttl"] = ttl
                out["token"] = c.call("claim.acquire", params)["result"]["token"]
                filler = fill(state)
                for i in range(2000):  # use up what room the WAL still has
                    if "error" in register(c, f"pad{i}", big=True):
                        break
                if refuse is not None:
                    out["refused"] = c.call(*refuse)
                else:  # the sweeper frees the claim; the disk refuses to store that
                    failed = d.logs().count("commit failed")
                    wait_for(lambda: not c.call("claim.list")["result"]["claims"])
                    wait_for(lambda: d.logs().count("commit failed") > failed)
                out["b_full"] = c.call("claim.acquire", {"session_id": "b", "resources": [key]})
                filler.unlink()
                out["b"] = c.call("claim.acquire", {"session_id": "b", "resources": [key]})
            d.kill()
            d.start()
            with Client(d.socket) as c:
                claims = c.call("claim.list")["result"]["claims"]
                out["holders"] = sorted(x["session_id"] for x in claims if x["resource"] == key)
                out["a_valid"] = c.call("claim.validate", {"resource": key, "token": out["token"]})[
                    "result"
                ]["valid"]
        finally:
            d.stop()
        return out

    def test_refused_release_keeps_the_claim(self, mesh_env: MeshEnv, small_state: Path) -> None:
        """A release told UNAVAILABLE releases nothing: the key is not handed to anyone,
        and after the disk recovers and a kill -9 exactly one session holds it."""
        key = key_in(small_state, "k")
        release = ("claim.release", {"session_id": "a", "resources": [key]})
        out = self.holders_after_recovery(mesh_env, small_state, release, None)

        assert out["refused"]["error"]["data"]["code"] == "UNAVAILABLE"
        assert out["b"]["result"]["status"] == "held"
        assert out["holders"] == ["a"]
        assert out["a_valid"] is True

    def test_refused_steal_keeps_the_victims_claim(
        self, mesh_env: MeshEnv, small_state: Path
    ) -> None:
        """A steal told UNAVAILABLE takes nothing from its victim (same token, valid)."""
        key = key_in(small_state, "k")
        steal = ("claim.steal", {"session_id": "b", "resources": [key], "reason": "now"})
        out = self.holders_after_recovery(mesh_env, small_state, steal, None)

        assert out["refused"]["error"]["data"]["code"] == "UNAVAILABLE"
        assert out["b_full"]["result"]["status"] == "held"
        assert out["holders"] == ["a"]
        assert out["a_valid"] is True

    def test_ttl_end_refused_by_the_disk_is_stored_before_the_next_grant(
        self, mesh_env: MeshEnv, small_state: Path
    ) -> None:
        """A claim freed in the background (ttl ran out) while the disk is full: that
        end is kept and stored first, so the next holder is the only one after a restart."""
        out = self.holders_after_recovery(mesh_env, small_state, None, 0.3)

        assert out["b"]["result"]["status"] == "granted"
        assert out["holders"] == ["b"]
        assert out["a_valid"] is False
