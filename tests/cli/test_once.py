"""``meshctl once``: at most once, through the real daemon, real processes, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.support import reaped, wait_for

from .conftest import Meshctl, OfflineEnv, Run

Daemon = Any


def ok(run: Run) -> Run:
    assert run.code == 0, run
    return run


def states(meshctl: Meshctl, env: dict[str, str]) -> dict[str, str]:
    return {e["key"]: e["state"] for e in ok(meshctl("once", "--list", "--json", env=env)).json()}


def start_once(env: dict[str, str], key: str, script: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "meshctl.cli", "once", "--key", key, "--", "sh", "-c", script],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


class TestOnce:
    def test_runs_once_then_says_done_without_running(
        self, meshctl: Meshctl, daemon: Daemon, short_tmp: Path
    ) -> None:
        log = short_tmp / "sent"
        cmd = ["once", "--key", "report:2026-11-30", "--", "sh", "-c", f"echo sent >> {log}"]

        first = meshctl(*cmd, env=daemon.env)
        second = meshctl(*cmd, env=daemon.env)

        assert first.code == 0, first
        assert second.code == 75, second
        assert "is done" in second.err
        assert log.read_text() == "sent\n"
        assert states(meshctl, daemon.env) == {"report:2026-11-30": "done"}

    def test_a_failed_command_frees_the_key_and_passes_its_status(
        self, meshctl: Meshctl, daemon: Daemon
    ) -> None:
        failed = meshctl("once", "--key", "k", "--", "sh", "-c", "exit 3", env=daemon.env)

        assert failed.code == 3, failed
        assert states(meshctl, daemon.env) == {}
        ok(meshctl("once", "--key", "k", "--", "true", env=daemon.env))

    def test_unreachable_daemon_is_69_and_command_does_not_run(
        self, meshctl: Meshctl, offline_env: OfflineEnv
    ) -> None:
        """once never fails open."""
        marker = offline_env.root / "ran"
        offline_env.state_dir.write_text("not a folder")  # no daemon can start

        run = meshctl("once", "--key", "k", "--", "touch", str(marker), env=offline_env.env)

        assert run.code == 69, run
        assert not marker.exists()

    def test_kill_9_of_once_and_its_command_leaves_unknown_until_resolved(
        self, meshctl: Meshctl, daemon: Daemon, short_tmp: Path
    ) -> None:
        pidfile = short_tmp / "pid"
        with reaped(start_once(daemon.env, "pay", f"echo $$ > {pidfile}; exec sleep 60")) as runner:
            wait_for(lambda: pidfile.exists() and pidfile.read_text().strip())
            os.kill(runner.pid, signal.SIGKILL)
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
            runner.communicate(timeout=60)

        wait_for(lambda: states(meshctl, daemon.env).get("pay") == "unknown")
        blocked = meshctl("once", "--key", "pay", "--", "true", env=daemon.env)
        ok(meshctl("once", "--resolve", "pay", "free", env=daemon.env))
        again = meshctl("once", "--key", "pay", "--", "true", env=daemon.env)

        assert blocked.code == 75, blocked
        assert "once --resolve pay done|free" in blocked.err
        assert again.code == 0, again

    def test_a_daemon_killed_mid_command_keeps_the_reservation(
        self, meshctl: Meshctl, daemon: Daemon, short_tmp: Path
    ) -> None:
        """kill -9 of the daemon while COMMAND runs: the key is still running after the
        restart, nobody else may run it, and COMMAND's success is recorded as done."""
        started, go = short_tmp / "started", short_tmp / "go"
        script = f"touch {started}; while [ ! -e {go} ]; do sleep 0.05; done"
        with reaped(start_once(daemon.env, "deploy", script)) as runner:
            try:
                wait_for(started.exists)
                daemon.kill()
                daemon.start()

                during = meshctl("once", "--key", "deploy", "--", "true", env=daemon.env)
            finally:  # COMMAND ends even when the test failed (it would loop on)
                go.touch()
            runner.communicate(timeout=60)

        assert during.code == 75, during
        assert runner.returncode == 0
        assert states(meshctl, daemon.env) == {"deploy": "done"}

    def test_held_exit_replaces_75(self, meshctl: Meshctl, daemon: Daemon) -> None:
        ok(meshctl("once", "--key", "k", "--", "true", env=daemon.env))

        run = meshctl("once", "--key", "k", "--held-exit", "9", "--", "true", env=daemon.env)

        assert run.code == 9, run

    @pytest.mark.parametrize(
        "form",
        [
            ["--key", "k", "--resolve", "k", "done", "--", "sh", "-c", "echo ran"],
            ["--resolve", "k", "free", "--", "sh", "-c", "echo ran"],
            ["--list", "--key", "k", "--", "sh", "-c", "echo ran"],
            ["--resolve", "k", "done", "--ttl", "60"],
            ["--resolve", "k", "done", "--held-exit", "9"],
            ["--resolve", "k", "done", "--list"],
        ],
    )
    def test_the_three_forms_are_alternatives(
        self, form: list[str], meshctl: Meshctl, daemon: Daemon
    ) -> None:
        """SPEC §9: ``once --key K [--ttl S] -- COMMAND… | once --resolve K done|free``.
        Given together, ``--resolve`` (or ``--list``) won silently: COMMAND did not run,
        the key was settled by hand, and once exited 0 (fails before)."""
        run = meshctl("once", *form, env=daemon.env)

        assert run.code == 2, run
        assert "do not go together" in run.err, run
        assert "ran" not in run.out, run
        assert states(meshctl, daemon.env) == {}

    def test_a_live_running_key_cannot_be_resolved_by_hand(
        self, meshctl: Meshctl, daemon: Daemon, short_tmp: Path
    ) -> None:
        started, go = short_tmp / "started", short_tmp / "go"
        script = f"touch {started}; while [ ! -e {go} ]; do sleep 0.05; done"
        with reaped(start_once(daemon.env, "k", script)) as runner:
            try:
                wait_for(started.exists)

                refused = meshctl("once", "--resolve", "k", "free", env=daemon.env)
            finally:  # COMMAND ends even when the test failed (it would loop on)
                go.touch()
            runner.communicate(timeout=60)

        assert refused.code == 75, refused
        assert "running now" in refused.err


@pytest.mark.slow
def test_exactly_one_of_several_processes_runs_across_50_trials(
    daemon: Daemon, short_tmp: Path
) -> None:
    """Three `once` processes race for the same key, 50 times: one runs, two exit 75."""
    log = short_tmp / "ran"
    bad = []
    for trial in range(50):
        procs = [
            start_once(daemon.env, f"race:{trial}", f"echo {trial} >> {log}") for _ in range(3)
        ]
        codes = sorted(p.wait(timeout=60) for p in procs)
        for p in procs:
            p.communicate()
        if codes != [0, 75, 75]:
            bad.append((trial, codes))

    lines = log.read_text().split()

    assert bad == []
    assert sorted(map(int, lines)) == list(range(50))


def test_command_gets_onces_own_session_a_child_of_the_callers(
    meshctl: Meshctl, daemon: Daemon
) -> None:
    """SPEC §9: once runs as a short-lived session of its own, a child of --session,
    and hands its id to COMMAND in MESH_SESSION."""
    parent = ok(meshctl("register", "--task", "p", "--pid", str(os.getpid()), env=daemon.env))
    env = {**daemon.env, "MESH_SESSION": parent.out.strip()}
    script = 'meshctl sessions show "$MESH_SESSION" --json'
    env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"

    run = ok(meshctl("once", "--key", "k", "--", "sh", "-c", script, env=env))
    me = json.loads(run.out)

    assert me["session_id"] != parent.out.strip()
    assert me["source"] == "once"
    assert me["parent"] == parent.out.strip()


def test_a_once_job_gets_one_ledger_slot_per_utc_day_or_hour() -> None:
    """`meshctl job run` of a `once` job reserves `job:NAME:<slot>`: a day or an hour, UTC."""
    from meshctl.cli.jobs import slot

    t = 1_796_000_000.0  # 2026-11-30T00:53:20Z

    assert slot("daily", t) == "2026-11-30"
    assert slot("hourly", t) == "2026-11-30T00"
    assert slot("hourly", t + 3600) == "2026-11-30T01"
    assert slot("", t) == ""
