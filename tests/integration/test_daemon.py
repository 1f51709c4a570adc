"""The daemon as a process: one per profile, its socket, config, signals, restore, liveness."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys

import pytest
from tests.conftest import DaemonHandle, MeshEnv, rpc
from tests.support import wait_for


def session_ids(d: DaemonHandle) -> set[str]:
    return {s["session_id"] for s in d.call("session.list")["result"]["sessions"]}


class TestOnePerProfile:
    def test_second_daemon_exits_and_leaves_the_socket(self, daemon: DaemonHandle) -> None:
        """A second meshd for the profile exits non-zero, says why, and the first keeps serving."""
        ino = daemon.socket.stat().st_ino
        second = subprocess.run(
            [sys.executable, "-m", "meshd", "run", "--profile", "test"],
            env=daemon.env, capture_output=True, text=True, timeout=20,
        )  # fmt: skip

        assert second.returncode == 1
        assert "already serves this profile" in second.stderr
        assert daemon.socket.stat().st_ino == ino
        assert daemon.call("mesh.ping")["result"]["pong"] is True


class TestSocket:
    def test_modes(self, daemon: DaemonHandle) -> None:
        """Socket 0600 in a 0700 folder; the served path is recorded in the state folder."""
        assert stat.S_IMODE(daemon.socket.stat().st_mode) == 0o600
        assert stat.S_IMODE(daemon.socket.parent.stat().st_mode) == 0o700
        assert (daemon.state_dir / "test.socket").read_text().strip() == str(daemon.socket)

    def test_recreated_when_removed(self, daemon: DaemonHandle) -> None:
        """A logout clean-up removing the socket does not orphan the daemon."""
        daemon.socket.unlink()

        wait_for(daemon.socket.exists)
        wait_for(lambda: rpc(daemon.socket, "mesh.ping")["result"]["pong"])

    def test_foreign_uid_is_refused(self, daemon: DaemonHandle) -> None:
        """A process of another uid that reaches the socket gets FORBIDDEN and is closed."""
        if os.geteuid() != 0:
            pytest.skip("needs root to connect as another uid")
        for folder in (daemon.socket.parent, daemon.socket.parent.parent, daemon.state_dir.parent):
            folder.chmod(0o755)
        daemon.socket.chmod(0o666)
        code = (
            "import os,socket,json;os.setgid(65534);os.setuid(65534);"
            "s=socket.socket(socket.AF_UNIX);s.connect(%r);"
            "print(s.makefile().readline())" % str(daemon.socket)
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=10
        )

        assert '"FORBIDDEN"' in out.stdout, out.stderr
        assert "pong" not in out.stdout

    def test_socket_path_too_long_is_refused(self, mesh_env: MeshEnv) -> None:
        """A socket path over sun_path's limit: a clear message that names MESH_SOCKET."""
        env = {**mesh_env.env, "MESH_SOCKET": str(mesh_env.root / ("x" * 120) / "s.sock")}
        out = subprocess.run(
            [sys.executable, "-m", "meshd", "run", "--profile", "test"],
            env=env, capture_output=True, text=True, timeout=20,
        )  # fmt: skip

        assert out.returncode == 1
        assert "MESH_SOCKET" in out.stderr


class TestConfig:
    @pytest.mark.parametrize(
        ("text", "expect"),
        [
            ("[defaults]\nstale_afterr = 3\n", "stale_afterr"),
            ("[defaults]\nstale_after = 'soon'\n", "defaults.stale_after"),
            ("[profiles.test]\nenabled = 3\n", "profiles.test.enabled"),
            ("[defaults\n", "not valid TOML"),
            # inf passed `> 0` and went out on the wire as JSON null
            ("[defaults]\nexpire_after = inf\n", "`defaults.expire_after`: Expected a finite"),
            ("[profiles.test]\nstale_after = inf\n", "`profiles.test.stale_after`: Expected a"),
            # a table no profile can have: its overrides never applied, silently
            ('[profiles."work laptop"]\nstale_after = 3\n', "`profiles.work laptop`: a profile"),
        ],
    )
    def test_bad_config_refuses_to_start(self, mesh_env: MeshEnv, text: str, expect: str) -> None:
        """Unknown key or wrong type: refuse to start, naming the file and the key."""
        mesh_env.write_config(text)
        out = subprocess.run(
            [sys.executable, "-m", "meshd", "run", "--profile", "test"],
            env=mesh_env.env, capture_output=True, text=True, timeout=20,
        )  # fmt: skip

        assert out.returncode == 1
        assert str(mesh_env.config) in out.stderr
        assert expect in out.stderr

    def test_profile_table_overrides_defaults(self, mesh_env: MeshEnv) -> None:
        mesh_env.write_config(
            "[defaults]\nstale_after = 7\n[profiles.test]\nheartbeat_interval = 2\n"
            "[profiles.other]\nstale_after = 1\n"
        )
        d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
        d.start()
        try:
            cfg = d.call("mesh.info")["result"]["config"]
        finally:
            d.stop()

        assert (cfg["stale_after"], cfg["heartbeat_interval"]) == (7, 2)

    def test_reload_keeps_old_config_when_new_is_invalid(
        self, daemon: DaemonHandle, mesh_env: MeshEnv
    ) -> None:
        """mesh.reload applies a valid file, and refuses an invalid one keeping the old."""
        mesh_env.write_config("[defaults]\nstale_after = 9\n")
        ok = daemon.call("mesh.reload")["result"]
        mesh_env.write_config("[defaults]\nnope = 1\n")
        bad = daemon.call("mesh.reload")["result"]

        assert ok["reloaded"] is True
        assert bad["reloaded"] is False
        assert "nope" in bad["error"]
        assert daemon.call("mesh.info")["result"]["config"]["stale_after"] == 9

    def test_sighup_reloads(self, daemon: DaemonHandle, mesh_env: MeshEnv) -> None:
        mesh_env.write_config("[defaults]\nstale_after = 11\n")
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGHUP)

        wait_for(lambda: daemon.call("mesh.info")["result"]["config"]["stale_after"] == 11)

    def test_disabled_mesh_answers_no_ops(self, mesh_env: MeshEnv) -> None:
        """enabled = false: register/heartbeat succeed as no-ops; ping still answers."""
        mesh_env.write_config("[defaults]\nenabled = false\n")
        d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
        d.start()
        try:
            r = d.call("session.register", {"session_id": "x", "task": "t"})["result"]
            hb = d.call("session.heartbeat", {"session_id": "x"})["result"]
            listed = d.call("session.list")["result"]["sessions"]
        finally:
            d.stop()

        assert r["disabled"] is True
        assert r["session_id"] == "x"
        assert hb["disabled"] is True
        assert listed == []


class TestLiveness:
    def test_process_death_is_noticed(self, daemon: DaemonHandle) -> None:
        """A `process` session goes when its process dies (pidfd: at once)."""
        child = subprocess.Popen(["sleep", "600"])
        try:
            daemon.call(
                "session.register",
                {"session_id": "w", "pid": child.pid, "liveness": "process", "task": "sleep"},
            )
            assert "w" in session_ids(daemon)
            child.kill()
            child.wait()

            wait_for(lambda: "w" not in session_ids(daemon))
        finally:
            child.kill()
        err = daemon.call("session.heartbeat", {"session_id": "w"})["error"]
        assert err["data"]["code"] == "SESSION_EXPIRED"

    def test_session_lives_while_any_anchor_lives(self, daemon: DaemonHandle) -> None:
        """session.attach adds a process; the session ends only when the last one exits."""
        first, second = subprocess.Popen(["sleep", "600"]), subprocess.Popen(["sleep", "600"])
        try:
            daemon.call(
                "session.register", {"session_id": "r", "pid": first.pid, "liveness": "process"}
            )
            pids = daemon.call("session.attach", {"session_id": "r", "pid": second.pid})
            first.kill()
            first.wait()
            wait_for(lambda: daemon.call("session.get", {"session_id": "r"})["result"]["pid"]
                     == second.pid)  # fmt: skip
            assert "r" in session_ids(daemon)
            second.kill()
            second.wait()

            wait_for(lambda: "r" not in session_ids(daemon))
        finally:
            first.kill()
            second.kill()
        assert pids["result"]["pids"] == [first.pid, second.pid]

    def test_dead_pid_is_refused(self, daemon: DaemonHandle) -> None:
        child = subprocess.Popen(["true"])
        child.wait()

        err = daemon.call("session.register", {"pid": child.pid, "liveness": "process"})["error"]

        assert err["code"] == -32602
        assert "not running" in err["message"]

    def test_id_in_use_by_another_live_process(self, daemon: DaemonHandle) -> None:
        other = subprocess.Popen(["sleep", "600"])
        try:
            daemon.call("session.register", {"session_id": "s", "pid": other.pid})
            err = daemon.call("session.register", {"session_id": "s", "pid": os.getpid()})
        finally:
            other.kill()
            other.wait()

        assert err["error"]["data"]["code"] == "ID_IN_USE"

    def test_heartbeat_session_expires(self, mesh_env: MeshEnv) -> None:
        """With a short expire_after the silent session expires and says so."""
        mesh_env.write_config("[defaults]\nstale_after = 0.2\nexpire_after = 0.5\n")
        d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
        d.start()
        try:
            d.call("session.register", {"session_id": "h"})
            wait_for(lambda: d.call("session.get", {"session_id": "h"}).get("error"))
            err = d.call("session.heartbeat", {"session_id": "h"})["error"]
        finally:
            d.stop()

        assert err["data"]["code"] == "SESSION_EXPIRED"

    def test_bound_session_ends_when_its_connection_closes(self, mesh_env: MeshEnv) -> None:
        mesh_env.write_config("[defaults]\nheartbeat_interval = 0.2\n")
        d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
        d.start()
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(d.socket))
                s.sendall(
                    b'{"jsonrpc":"2.0","id":1,"method":"session.register",'
                    b'"params":{"session_id":"b","bind":true}}\n'
                )
                assert b'"result"' in s.recv(65536)
            wait_for(lambda: "b" not in session_ids(d))
        finally:
            d.stop()


class TestRestart:
    def test_sessions_survive_kill_9(self, daemon: DaemonHandle) -> None:
        """Registrations are committed before the reply: a kill -9 loses none."""
        ids = [
            daemon.call("session.register", {"session_id": f"k{i}", "task": f"t{i}"})["result"][
                "session_id"
            ]
            for i in range(20)
        ]
        daemon.kill()
        daemon.start()

        assert set(ids) <= session_ids(daemon)

    def test_ended_sessions_stay_ended(self, daemon: DaemonHandle) -> None:
        daemon.call("session.register", {"session_id": "gone"})
        daemon.call("session.end", {"session_id": "gone"})
        daemon.kill()
        daemon.start()

        assert "gone" not in session_ids(daemon)

    def test_sigterm_writes_a_final_snapshot(self, daemon: DaemonHandle) -> None:
        """Reported fields changed just before SIGTERM are there after the restart."""
        daemon.call("session.register", {"session_id": "snap", "task": "old"})
        daemon.call(
            "session.heartbeat", {"session_id": "snap", "task": "new", "status": "thinking"}
        )

        assert daemon.stop() == 0
        daemon.start()
        s = daemon.call("session.get", {"session_id": "snap"})["result"]
        assert (s["task"], s["status"]) == ("new", "thinking")

    def test_dead_process_sessions_go_at_restart(self, daemon: DaemonHandle) -> None:
        """`process` sessions are re-checked at once on restore."""
        child = subprocess.Popen(["sleep", "600"])
        daemon.call(
            "session.register", {"session_id": "p", "pid": child.pid, "liveness": "process"}
        )
        daemon.kill()
        child.kill()
        child.wait()
        daemon.start()

        wait_for(lambda: "p" not in session_ids(daemon))


def test_corrupt_database_refuses_to_start(mesh_env: MeshEnv) -> None:
    """A damaged database is never deleted: meshd refuses and says how to move it aside."""
    mesh_env.state_dir.mkdir(mode=0o700)
    db = mesh_env.state_dir / "test.sqlite3"
    db.write_bytes(b"this is not sqlite" * 100)
    out = subprocess.run(
        [sys.executable, "-m", "meshd", "run", "--profile", "test"],
        env=mesh_env.env, capture_output=True, text=True, timeout=20,
    )  # fmt: skip

    assert out.returncode == 1
    assert "mv " in out.stderr
    assert db.read_bytes().startswith(b"this is not sqlite")


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_a_newer_database_is_refused_and_left_untouched(mesh_env: MeshEnv, journal: str) -> None:
    """SPEC §8: a database written by a newer release is refused at start with both
    versions named, and left untouched. meshd switched it to WAL (its header's bytes
    changed, for a file in rollback-journal mode) and chmod'ed it 0600 before it read
    the version."""
    from meshd import __version__
    from meshd.store import SCHEMA_VERSION

    mesh_env.state_dir.mkdir(mode=0o700)
    path = mesh_env.state_dir / "test.sqlite3"
    made = sqlite3.connect(path)
    made.execute(f"PRAGMA journal_mode={journal}")
    made.execute("CREATE TABLE future (x)")
    made.execute("INSERT INTO future VALUES (1)")
    made.execute(f"PRAGMA user_version={SCHEMA_VERSION + 5}")
    made.commit()
    made.close()
    path.chmod(0o644)
    before = (path.read_bytes(), stat.S_IMODE(path.stat().st_mode))

    out = subprocess.run(
        [sys.executable, "-m", "meshd", "run", "--profile", "test"],
        env=mesh_env.env, capture_output=True, text=True, timeout=20,
    )  # fmt: skip

    assert out.returncode == 1, out
    assert f"schema version {SCHEMA_VERSION + 5}" in out.stderr, out.stderr
    assert f"knows ({SCHEMA_VERSION})" in out.stderr, out.stderr
    assert f"meshd {__version__} knows" in out.stderr, out.stderr  # this release, named
    assert (path.read_bytes(), stat.S_IMODE(path.stat().st_mode)) == before
    assert sorted(p.name for p in mesh_env.state_dir.glob("test.sqlite3*")) == ["test.sqlite3"]


def test_profile_name_is_checked(mesh_env: MeshEnv) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "meshd", "run", "--profile", "../etc"],
        env=mesh_env.env, capture_output=True, text=True, timeout=20,
    )  # fmt: skip

    assert out.returncode == 1
    assert "invalid profile name" in out.stderr


def test_sigterm_ends_the_daemon_with_waiters_and_stalled_readers(daemon: DaemonHandle) -> None:
    """Shutdown does not wait on a queued claim or on a client that stopped reading."""
    daemon.call("session.register", {"session_id": "holder"})
    daemon.call("session.register", {"session_id": "waiter"})
    daemon.call("claim.acquire", {"session_id": "holder", "resources": ["res:x"]})
    waiting = socket.socket(socket.AF_UNIX)
    waiting.connect(str(daemon.socket))
    waiting.sendall(
        b'{"jsonrpc":"2.0","id":1,"method":"claim.acquire","params":'
        b'{"session_id":"waiter","resources":["res:x"],"wait":60}}\n'
    )
    stalled = socket.socket(socket.AF_UNIX)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(str(daemon.socket))
    stalled.setblocking(False)
    burst = b'{"jsonrpc":"2.0","id":2,"method":"mesh.schema"}\n' * 100
    for _ in range(20):
        try:
            stalled.send(burst)
        except BlockingIOError:
            break
    wait_for(lambda: daemon.call("mesh.info")["result"]["counts"]["waiters"] == 1)
    try:
        assert daemon.stop() == 0
    finally:
        waiting.close()
        stalled.close()


def test_socket_activation_adopts_and_leaves_the_socket(mesh_env: MeshEnv) -> None:
    """A socket passed as fd 3 (LISTEN_FDS) is served, recorded, and left in place on stop:
    it belongs to systemd, which keeps listening for the next start."""
    path = mesh_env.root / "activated.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(16)
    # What systemd does: the socket at fd 3 (SD_LISTEN_FDS_START), LISTEN_PID = the pid
    # that will run meshd (exec keeps it).
    wrapper = (
        "import os, sys; os.dup2(int(sys.argv[1]), 3); os.set_inheritable(3, True); "
        "os.environ['LISTEN_PID'] = str(os.getpid()); "
        "os.execv(sys.executable, [sys.executable, '-m', 'meshd', 'run', '--profile', 'test'])"
    )
    env = {**mesh_env.env, "LISTEN_FDS": "1", "LISTEN_FDNAMES": "meshd"}
    fd = listener.fileno()
    proc = subprocess.Popen([sys.executable, "-c", wrapper, str(fd)], env=env, pass_fds=(fd,))
    listener.close()
    try:
        wait_for(lambda: _pings(path))
        recorded = (mesh_env.state_dir / "test.socket").read_text().strip()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)

    assert recorded == str(path)
    assert code == 0
    assert path.exists()


def _pings(path: object) -> bool:
    try:
        return bool(rpc(path, "mesh.ping")["result"]["pong"])  # type: ignore[arg-type]
    except OSError:
        return False


_EARLY_CLIENT = """
import json, os, socket, sys, threading
from meshd import app, cli

sent = threading.Event()

def client(path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)  # bound, not yet accepting: the connection waits in the backlog
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"session.list"}\\n')
    sent.set()
    reply = b""
    while not reply.endswith(b"\\n"):
        reply += s.recv(65536)
    ids = sorted(x["session_id"] for x in json.loads(reply)["result"]["sessions"])
    print("answered after the restore:", ids, flush=True)
    os._exit(0)

open_store = app.Daemon.open_store
def restoring(self):
    threading.Thread(target=client, args=(str(self._served),), daemon=True).start()
    sent.wait(10)  # the request is in before the restore begins
    print("request sent while restoring", flush=True)
    open_store(self)
app.Daemon.open_store = restoring
sys.argv = ["meshd", "run", "--profile", "test"]
cli.main()
"""


def test_a_request_sent_during_the_restore_waits_for_it(
    daemon: DaemonHandle, mesh_env: MeshEnv
) -> None:
    """The socket is bound before the restore, but nothing is read until it is done:
    a request that came in meanwhile is answered from the whole restored state."""
    daemon.call("session.register", {"session_id": "kept", "task": "t"})
    daemon.stop()

    out = subprocess.run(
        [sys.executable, "-c", _EARLY_CLIENT],
        env=mesh_env.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip

    assert out.stdout.splitlines() == [
        "request sent while restoring",
        "answered after the restore: ['kept']",
    ], out.stderr


def test_a_database_that_cannot_open_leaves_no_socket(mesh_env: MeshEnv) -> None:
    """The socket is bound before the database opens: a refusal removes it again."""
    mesh_env.state_dir.mkdir(mode=0o700)
    (mesh_env.state_dir / "test.sqlite3").write_bytes(b"this is not sqlite" * 100)
    out = subprocess.run(
        [sys.executable, "-m", "meshd", "run", "--profile", "test"],
        env=mesh_env.env, capture_output=True, text=True, timeout=20,
    )  # fmt: skip

    assert out.returncode == 1
    assert not mesh_env.socket.exists()
