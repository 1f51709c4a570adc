"""``meshctl`` against the real daemon (fixture ``daemon``), each run a real subprocess."""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support import reaped, wait_for

from .conftest import Meshctl, Run


def serving(proc: subprocess.Popen[bytes], sock: Path) -> bool:
    """Whether the daemon ``proc`` runs and its socket is there."""
    return proc.poll() is None and sock.exists()


# The fixtures come from tests/conftest.py (the lead's); typed loosely here.
Daemon = Any
MeshEnv = Any


def ok(run: Run) -> Run:
    assert run.code == 0, run
    return run


class TestRegisterAndList:
    def test_register_prints_only_the_id(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """register prints the id alone, and the session then shows in sessions active."""
        run = ok(meshctl("register", "--task", "refactor auth", env=daemon.env))
        sid = run.out.strip()

        listing = ok(meshctl("sessions", "active", env=daemon.env))

        assert run.out == sid + "\n"
        assert " " not in sid
        assert listing.out.splitlines()[0] == "Active sessions (profile test):"
        assert f"- {sid} — refactor auth, in " in listing.out
        assert ", status: idle, " in listing.out

    def test_register_speaks_for_its_caller(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """Without --pid a process session carries meshctl's parent pid (here: pytest)."""
        sid = ok(meshctl("register", "--task", "t", "--id", "cli:me", env=daemon.env)).out.strip()

        shown = ok(meshctl("sessions", "show", sid, "--json", env=daemon.env)).json()

        assert sid == "cli:me"
        assert shown["pid"] == os.getpid()
        assert shown["liveness"] == "process"
        assert shown["host"] == socket.gethostname()

    def test_heartbeat_liveness_sends_no_pid(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """--liveness heartbeat without --pid ties the session to no process."""
        reg = ok(
            meshctl("register", "--task", "t", "--liveness", "heartbeat", "--json", env=daemon.env)
        ).json()

        shown = ok(meshctl("sessions", "show", reg["session_id"], "--json", env=daemon.env))

        assert reg["liveness"] == "heartbeat"
        assert shown.json()["pid"] is None

    def test_json_shapes(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """sessions active --json is a list of session objects with the SPEC's fields."""
        ok(meshctl("register", "--task", "a", "--source", "cron", env=daemon.env))

        sessions = ok(meshctl("--json", "sessions", "active", env=daemon.env)).json()

        assert isinstance(sessions, list)
        assert len(sessions) == 1
        expected = {
            "session_id",
            "profile",
            "source",
            "status",
            "task",
            "cwd",
            "repo",
            "branch",
            "pid",
            "host",
            "last_heartbeat",
            "age_s",
            "stale",
            "liveness",
            "claims",
        }
        assert expected <= set(sessions[0])
        assert sessions[0]["profile"] == "test"
        assert sessions[0]["source"] == "cron"

    def test_none_active(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """With no sessions the human form is one line, the JSON form an empty list."""
        human = ok(meshctl("sessions", "active", env=daemon.env))
        doc = ok(meshctl("sessions", "active", "--json", env=daemon.env))

        assert human.out == "No active sessions (profile test).\n"
        assert doc.json() == []

    def test_show_unknown_session(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """An unknown id is an error (1) with the daemon's data.code and a hint."""
        run = meshctl("sessions", "show", "nope:1", "--json", env=daemon.env)

        assert run.code == 1, run
        assert run.json()["error"]["data"]["code"] == "UNKNOWN_SESSION"
        assert "meshctl sessions active" in run.err

    def test_oldest_first_after_a_restart(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """The listing is in the order sessions started, restored or not (it came back
        in id order)."""
        ids = ["zeta:1", "alpha:2", "mu:3"]
        for sid in ids:
            ok(
                meshctl(
                    "register",
                    "--id",
                    sid,
                    "--task",
                    "t",
                    "--liveness",
                    "heartbeat",
                    env=daemon.env,
                )
            )
        before = ok(meshctl("sessions", "active", "--json", env=daemon.env)).json()

        daemon.restart()
        after = ok(meshctl("sessions", "active", "--json", env=daemon.env)).json()
        human = ok(meshctl("sessions", "active", env=daemon.env)).out

        assert [s["session_id"] for s in before] == ids
        assert [s["session_id"] for s in after] == ids
        assert [line.split()[1] for line in human.splitlines()[1:]] == ids


class TestActingForASession:
    def test_heartbeat_then_end(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """heartbeat updates status and task silently; end releases the session."""
        sid = ok(meshctl("register", "--task", "first", env=daemon.env)).out.strip()
        env = {**daemon.env, "MESH_SESSION": sid}

        beat = ok(meshctl("heartbeat", "--status", "tool-running", "--task", "second", env=env))
        shown = ok(meshctl("sessions", "show", sid, "--json", env=env)).json()
        ok(meshctl("claim", "res:a", "port:8080", env=env))
        ended = ok(meshctl("end", "--handoff", "left it green", "--json", env=env)).json()
        after = ok(meshctl("sessions", "active", "--json", env=env)).json()

        assert beat.out == ""
        assert (shown["status"], shown["task"]) == ("tool-running", "second")
        assert ended["ended"] is True
        assert sorted(ended["released"]) == ["port:8080", "res:a"]
        assert ended["session_id"] == sid
        assert [s["session_id"] for s in after] == []

    def test_session_option(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """--session given on the command line is used when MESH_SESSION is unset."""
        sid = ok(meshctl("register", "--task", "x", env=daemon.env)).out.strip()

        run = ok(meshctl("--session", sid, "heartbeat", "--json", env=daemon.env))

        assert run.json()["ok"] is True


class TestStale:
    def test_fresh_hides_stale(self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv) -> None:
        """A heartbeat session past stale_after is shown marked [stale], and hidden by --fresh."""
        mesh_env.write_config("[defaults]\nstale_after = 0.5\n")
        ok(meshctl("daemon", "reload", env=daemon.env))
        register = ("register", "--task", "slow", "--liveness", "heartbeat")
        sid = ok(meshctl(*register, env=daemon.env)).out.strip()

        def stale() -> bool:
            found = ok(meshctl("sessions", "active", "--json", env=daemon.env)).json()
            return any(s["session_id"] == sid and s["stale"] for s in found)

        wait_for(stale, what="the session to turn stale")
        human = ok(meshctl("sessions", "active", env=daemon.env))
        fresh = ok(meshctl("sessions", "active", "--fresh", "--json", env=daemon.env))
        fresh_human = ok(meshctl("sessions", "active", "--fresh", env=daemon.env))

        assert f"- {sid} — slow" in human.out
        assert human.out.rstrip().endswith("  [stale]")
        assert fresh.json() == []
        assert fresh_human.out == "No active sessions (profile test).\n"

    def test_process_session_is_never_stale(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        """A shell registered with ``meshctl register`` (liveness process) stays fresh past
        stale_after while its process lives (SPEC §4): no [stale], kept by --fresh, and
        its line shows how long it has been idle."""
        mesh_env.write_config("[defaults]\nstale_after = 0.3\n")
        ok(meshctl("daemon", "reload", env=daemon.env))
        sid = ok(meshctl("register", "--task", "shell", env=daemon.env)).out.strip()
        heartbeat = ok(
            meshctl("register", "--task", "hb", "--liveness", "heartbeat", env=daemon.env)
        )
        other = heartbeat.out.strip()

        def listed() -> list[dict[str, Any]]:
            return ok(meshctl("sessions", "active", "--json", env=daemon.env)).json()  # type: ignore[no-any-return]

        wait_for(
            lambda: any(s["session_id"] == other and s["stale"] for s in listed()), what="stale"
        )
        mine = next(s for s in listed() if s["session_id"] == sid)
        fresh = ok(meshctl("sessions", "active", "--fresh", "--json", env=daemon.env)).json()
        human = ok(meshctl("sessions", "active", env=daemon.env)).out

        assert mine["stale"] is False
        assert mine["idle_s"] >= mine["age_s"] >= 0.3
        assert [s["session_id"] for s in fresh] == [sid]
        line = next(x for x in human.splitlines() if sid in x)
        assert "[stale]" not in line
        assert ", idle " in line

    def test_activity_is_kept_and_shown(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """SPEC §9's "status: tool-running (running tests)": the activity a heartbeat
        reports is kept by the daemon and printed; a new status clears it."""
        sid = ok(meshctl("register", "--task", "refactor auth", env=daemon.env)).out.strip()
        beat = {"session_id": sid, "status": "tool-running", "activity": "running tests"}
        assert "result" in daemon.call("session.heartbeat", beat)

        shown = ok(meshctl("sessions", "show", sid, "--json", env=daemon.env)).json()
        human = ok(meshctl("sessions", "active", env=daemon.env)).out
        assert "result" in daemon.call("session.heartbeat", {"session_id": sid, "status": "idle"})
        after = ok(meshctl("sessions", "show", sid, "--json", env=daemon.env)).json()

        assert shown["activity"] == "running tests"
        assert "status: tool-running (running tests)" in human
        assert after["activity"] == ""


class TestDaemonCommands:
    def test_status_running(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """daemon status exits 0 and reports the daemon's pid, socket and counts."""
        doc = ok(meshctl("daemon", "status", "--json", env=daemon.env)).json()
        human = ok(meshctl("daemon", "status", env=daemon.env))

        assert doc["pid"] == daemon.proc.pid
        assert doc["socket"] == str(daemon.socket)
        assert "sessions" in doc["counts"]
        assert f"pid       {daemon.proc.pid}" in human.out
        assert "uptime" in human.out

    def test_status_counts_signal_waits(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """mesh.info counts parked ``signal wait`` calls (``counts.signal_waits``) beside
        the claim waiters; ``daemon status`` showed the other counts but not this one
        (fails before)."""
        waiter = subprocess.Popen(
            [sys.executable, "-m", "meshctl.cli", "signal", "wait", "sig-x", "--timeout", "120"],
            env=daemon.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_for(
                lambda: daemon.call("mesh.info")["result"]["counts"]["signal_waits"] == 1,
                what="the signal wait parked",
            )
            doc = ok(meshctl("daemon", "status", "--json", env=daemon.env)).json()
            human = ok(meshctl("daemon", "status", env=daemon.env)).out
        finally:
            waiter.kill()
            waiter.wait(timeout=30)

        assert doc["counts"]["signal_waits"] == 1
        assert "waiters 0, signal waits 1, connections" in human

    def test_status_of_another_profile_at_the_socket(
        self, meshctl: Meshctl, daemon: Daemon
    ) -> None:
        """MESH_SOCKET names profile test's daemon and --profile other asks: the daemon
        runs, so status says whose it is, not "no meshd is running" with a start hint."""
        run = meshctl("daemon", "status", "--profile", "other", env=daemon.env)

        assert run.code == 69, run
        assert "serves profile 'test', not 'other'" in run.err
        assert "no meshd is running" not in run.err
        assert "start it" not in run.err

    def test_stop_of_another_profile_at_the_socket(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """stop --profile other, MESH_SOCKET naming test's daemon: refused with why, exit
        69, the daemon left running (was "no meshd is running; nothing to stop", exit 0)."""
        run = meshctl("daemon", "stop", "--profile", "other", env=daemon.env)

        assert run.code == 69, run
        assert "serves profile 'test', not 'other'" in run.err
        assert "nothing to stop" not in run.err
        assert daemon.proc.poll() is None

    def test_status_and_stop_of_a_daemon_that_does_not_answer(
        self, meshctl: Meshctl, daemon: Daemon
    ) -> None:
        """A stopped daemon (SIGSTOP: it takes connections, answers nothing). status said
        "no reply ... check `meshctl daemon status`" (what was run) and stop could not
        stop it (exit 75, nothing sent). Now status names its pid and the way out, and
        stop finds it by the pid in its lock file and sends SIGTERM all the same."""
        pid = daemon.proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            status = meshctl("daemon", "status", env=daemon.env)
            stop = subprocess.Popen(
                [sys.executable, "-m", "meshctl.cli", "daemon", "stop"],
                env=daemon.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            with reaped(stop):
                try:
                    wait_for(lambda: _pending(pid) & (1 << (signal.SIGTERM - 1)))
                finally:
                    os.kill(pid, signal.SIGCONT)
                out, err = stop.communicate(timeout=60)
        finally:
            os.kill(pid, signal.SIGCONT)

        assert status.code == 75, status
        assert status.err.startswith(f"meshctl: meshd (pid {pid}) of profile test takes"), status
        assert "check `meshctl daemon status`" not in status.err
        assert "`meshctl daemon stop --profile test` stops it" in status.err
        assert stop.returncode == 0, (out, err)
        assert out == f"Stopped meshd (profile test, pid {pid}).\n"
        assert daemon.proc.wait(timeout=10) is not None

    def test_stop_waits_until_gone(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """daemon stop sends SIGTERM and returns once the daemon has exited."""
        run = ok(meshctl("daemon", "stop", "--json", env=daemon.env))

        assert run.json() == {
            "stopped": True,
            "running": False,
            "profile": "test",
            "pid": daemon.proc.pid,
        }
        assert daemon.proc.wait(timeout=5) is not None
        assert meshctl("daemon", "status", env=daemon.env).code == 69

    def test_start_reports_already_running(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """daemon start on a running daemon starts nothing and says so."""
        run = ok(meshctl("daemon", "start", "--json", env=daemon.env))

        assert run.json()["already_running"] is True
        assert run.json()["pid"] == daemon.proc.pid

    def test_reload_reports_kept_config(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        """An invalid config is refused: exit 1, CONFIG_INVALID; a valid one reloads."""
        mesh_env.write_config("[defaults]\nstale_after = 'soon'\n")
        bad = meshctl("daemon", "reload", "--json", env=daemon.env)
        mesh_env.write_config("[defaults]\nstale_after = 3\n")
        good = ok(meshctl("daemon", "reload", "--json", env=daemon.env))

        assert bad.code == 1, bad
        assert bad.json()["error"]["data"]["code"] == "CONFIG_INVALID"
        assert "keeps its previous config" in bad.err
        assert good.json()["reloaded"] is True

    def test_reload_names_the_file_the_daemon_reads(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        """SPEC §2: ``MESH_CONFIG`` overrides the config file, and ``daemon reload``
        re-reads it -- the daemon's, fixed when it started. A shell whose MESH_CONFIG
        names another file edited that one, reloaded, and read "Config reloaded": the
        edit was never read (fails before). The answer names the daemon's file, and a
        note says it is not this shell's."""
        other = mesh_env.root / "other.toml"
        other.write_text("[defaults]\nstale_after = 3\n")

        same = ok(meshctl("daemon", "reload", env=daemon.env))
        elsewhere = ok(meshctl("daemon", "reload", env={**daemon.env, "MESH_CONFIG": str(other)}))
        doc = ok(meshctl("daemon", "reload", "--json", env=daemon.env)).json()

        assert same.out.strip() == f"Config reloaded from {mesh_env.config} (profile test)."
        assert same.err == "", same
        assert f"this daemon reads {mesh_env.config}, not {other}" in elsewhere.err, elsewhere
        assert doc["path"] == str(mesh_env.config)
        assert doc["config"]["stale_after"] == 20


class TestWrongSocket:
    def test_a_wrong_mesh_socket_names_the_socket_served(
        self, meshctl: Meshctl, daemon: Daemon
    ) -> None:
        """MESH_SOCKET names a path where no daemon answers while one serves the profile
        elsewhere: the refusal names where it serves and what to set (it called the
        wrong path the running daemon's socket)."""
        wrong = daemon.socket.parent / "wrong.sock"
        env = {**daemon.env, "MESH_SOCKET": str(wrong), "MESH_SPAWN": "direct"}

        r = meshctl("sessions", "active", env=env)

        assert r.code == 69, r
        assert f"already serves this profile on {daemon.socket} " in r.err
        assert f"not on {wrong} (MESH_SOCKET)" in r.err
        assert f"set MESH_SOCKET={daemon.socket} or unset MESH_SOCKET" in r.err


class TestCall:
    def test_call_prints_result_json(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """call prints the raw result as JSON even without --json."""
        assert ok(meshctl("call", "mesh.ping", env=daemon.env)).json()["pong"] is True

    def test_call_params_from_stdin(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """'-' reads the params from stdin."""
        run = ok(meshctl("call", "session.list", "-", input='{"fresh": true}', env=daemon.env))

        assert run.json()["profile"] == "test"

    def test_call_daemon_error(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """A daemon error exits 1 with the wire error object under --json."""
        run = meshctl("call", "no.such", "--json", env=daemon.env)

        assert run.code == 1, run
        assert run.json()["error"]["code"] == -32601
        assert run.json()["error"]["data"]["code"] == "METHOD_NOT_FOUND"

    def test_call_invalid_params_names_the_field(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """The refused field's JSON path is in the sentence, not only in data.path (it
        said "Invalid params: Expected `str`, got `int`": which of the params?)."""
        run = meshctl("call", "session.register", '{"task": 5}', env=daemon.env)

        assert run.code == 1, run
        assert run.err.splitlines()[0] == (
            "meshctl: Invalid params: Expected `str`, got `int` - at `$.task`"
        )

    def test_call_waits_as_long_as_the_method_does(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """A raw call of a method that waits (signal.wait, claim.acquire with wait,
        query.ask …) waits for the daemon's answer, not the client's 5 s default
        (before: "no reply from meshd within 5.0 s", exit 75, while the daemon was
        still rightly waiting)."""
        params = '{"name": "never-emitted", "timeout": 6}'

        run = meshctl("call", "signal.wait", params, env=daemon.env)

        assert run.code == 0, run
        assert run.json()["received"] is False


# --- several profiles -------------------------------------------------------------


@pytest.fixture
def other_daemons(mesh_env: MeshEnv, daemon: Daemon) -> Iterator[dict[str, Path]]:
    """Two more daemons in the same runtime folder: ``other`` sees-through to ``test``,
    ``hidden`` does not; plus a dead socket file ``gone.sock``."""
    mesh_env.write_config('[profiles.other]\nvisible_to_profiles = ["test"]\n')
    folder = daemon.socket.parent
    procs = []
    socks: dict[str, Path] = {}
    for profile in ("other", "hidden"):
        socks[profile] = folder / f"{profile}.sock"
        env = {**daemon.env, "MESH_SOCKET": str(socks[profile]), "MESH_PROFILE": profile}
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "meshd", "run", "--profile", profile],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(folder / "gone.sock"))
    dead.close()  # leaves the file: nobody listens
    try:
        for profile, proc in zip(("other", "hidden"), procs, strict=True):
            wait_for(
                functools.partial(serving, proc, socks[profile]),
                what=f"meshd {profile}",
            )
        yield socks
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=15)


class TestAllProfiles:
    def test_lists_visible_profiles_only(
        self, meshctl: Meshctl, daemon: Daemon, other_daemons: dict[str, Path]
    ) -> None:
        """--all-profiles adds profiles that let us see them, skips others, never fails."""
        for profile, sock in other_daemons.items():
            ok(
                meshctl(
                    "register",
                    "--task",
                    f"in {profile}",
                    "--profile",
                    profile,
                    "--socket",
                    str(sock),
                    env=daemon.env,
                )
            )
        ok(meshctl("register", "--task", "at home", env=daemon.env))

        doc = ok(meshctl("sessions", "active", "--all-profiles", "--json", env=daemon.env))
        human = ok(meshctl("sessions", "active", "--all-profiles", env=daemon.env))
        plain = ok(meshctl("sessions", "active", "--json", env=daemon.env))

        assert sorted((s["profile"], s["task"]) for s in doc.json()) == [
            ("other", "in other"),
            ("test", "at home"),
        ]
        assert "Active sessions (profile test):" in human.out
        assert "Active sessions (profile other):" in human.out
        assert "hidden" not in human.out
        assert "skipped profile gone" in human.err
        assert [s["profile"] for s in plain.json()] == ["test"]

    def test_never_starts_other_daemons(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        """A dead socket of another profile is skipped, and no daemon is started for it."""
        dead = socket.socket(socket.AF_UNIX)
        dead.bind(str(daemon.socket.parent / "ghost.sock"))
        dead.close()

        run = ok(meshctl("sessions", "active", "--all-profiles", env=daemon.env))

        assert "skipped profile ghost" in run.err
        assert not (mesh_env.state_dir / "ghost.log").exists()
        assert not (mesh_env.state_dir / "ghost.lock").exists()


class TestDisabled:
    def test_register_and_heartbeat_note_disabled(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        """With enabled = false, register still prints an id and both say so once on stderr."""
        mesh_env.write_config("[defaults]\nenabled = false\n")
        ok(meshctl("daemon", "reload", env=daemon.env))

        reg = ok(meshctl("register", "--task", "t", env=daemon.env))
        beat = ok(meshctl("--session", reg.out.strip(), "heartbeat", env=daemon.env))

        assert reg.out.strip()
        assert reg.err.count("disabled") == 1
        assert beat.err.count("disabled") == 1


class TestImportWeightWithDaemon:
    @pytest.mark.parametrize(
        "args",
        [["sessions", "active", "--json"], ["sessions", "active"], ["daemon", "status"]],
    )
    def test_no_heavy_imports(self, args: list[str], daemon: Daemon) -> None:
        """A full round trip imports none of anyio, msgspec, platformdirs (BENCH.md)."""
        from .test_offline import HEAVY, imported_modules

        names = imported_modules(args, daemon.env, 0)

        assert "meshctl" in names
        assert names.isdisjoint(HEAVY), sorted(names & set(HEAVY))


def _pending(pid: int) -> int:
    """The signals pending for process ``pid`` (``ShdPnd`` in /proc/PID/status)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("ShdPnd:"):
                return int(line.split()[1], 16)
    return 0
