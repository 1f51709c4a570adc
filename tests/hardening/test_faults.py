"""Storage faults with real parts: a full disk and a read-only state folder.

The state folder is a small tmpfs mounted for the test (root only: skipped with the
reason otherwise). SPEC §8: when the database cannot be written the daemon
acknowledges nothing it could not store (``UNAVAILABLE``) and keeps serving reads;
once space is back, writes work again. A corrupt database is covered by
tests/integration/test_daemon.py.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import DaemonHandle, MeshEnv
from tests.hardening.support import Client, session_ids, wait_for

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
    """Write a file until the filesystem says ENOSPC; return it (delete it to free space)."""
    filler = folder / "filler"
    with filler.open("wb") as f:
        block = b"\0" * 65536
        try:
            while True:
                f.write(block)
                f.flush()
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    # Top up the last partial block too: the page cache may have taken less than 64 KiB.
    try:
        with filler.open("ab") as f:
            while True:
                f.write(b"\0" * 512)
                f.flush()
    except OSError:
        pass
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
        methods = d.call("mesh.schema")["result"]["methods"]
        if "claim.acquire" not in methods or "message.send" not in methods:
            d.stop()
            pytest.skip("claims and messages are not served yet")
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
                wait_for(lambda: d.logs().count("commit failed") >= 2, timeout=10)
                filler.unlink()
                assert "result" in register(c, "after")
            assert d.stop() == 0
            d.start()
            with Client(d.socket) as c:
                task = c.call("session.get", {"session_id": "snap"})["result"]["task"]

            assert task == "changed while full"
        finally:
            d.stop()


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
            assert d.proc is not None
            try:
                code = d.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                code = None
            if code is None:  # it serves: reads work, writes are UNAVAILABLE
                d.wait_ready()
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
