"""Declared jobs through the real daemon and the real CLI (SPEC §7 "Jobs").

``[jobs.NAME]`` tables in config.toml, ``meshctl job run`` with both policies, the
radar (``meshctl jobs``), critical deferrals that are never silent (``jobs`` and
``sync``), ``job wait``, a run killed with ``kill -9``, and bad manifests refused.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import DaemonHandle, MeshEnv
from tests.support import reaped, wait_for

CONFIG = """
[jobs.backup]
resources = ["{proj}", "cron:backup"]
policy = "wait"
timeout = 0.5
critical = true

[jobs.watchdog]
resources = ["res:gpu-fleet"]
policy = "skip"

[jobs.report]
resources = ["res:report"]
policy = "skip"
once = "daily"
"""


def meshctl(
    env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meshctl.cli", *args],
        env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


@pytest.fixture
def jobs_env(mesh_env: MeshEnv) -> Iterator[tuple[dict[str, str], DaemonHandle, Path]]:
    proj = mesh_env.root / "proj"
    proj.mkdir()
    mesh_env.write_config(CONFIG.format(proj=proj))
    d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
    d.start()
    yield dict(mesh_env.env), d, proj
    if d.proc is not None and d.proc.poll() is None:
        d.stop()


def radar(env: dict[str, str]) -> dict[str, Any]:
    done = meshctl(env, "jobs", "--json")
    assert done.returncode == 0, done.stderr
    return {j["name"]: j for j in json.loads(done.stdout)["jobs"]}


def holder(env: dict[str, str], resource: str) -> str:
    sid = meshctl(env, "register", "--task", "refactor auth", "--liveness", "heartbeat").stdout
    sid = sid.strip()
    assert meshctl(env, "claim", "--session", sid, resource).returncode == 0
    return sid


class TestJobRun:
    def test_a_run_is_recorded_on_the_radar(self, jobs_env: Any) -> None:
        """exit 0 of COMMAND: `job run` exits 0; the radar has its start and end."""
        env, _, _ = jobs_env

        done = meshctl(env, "job", "run", "backup", "--", "sh", "-c", "echo out; exit 0")

        assert done.returncode == 0, done.stderr
        assert done.stdout == "out\n"
        job = radar(env)["backup"]
        assert job["declared"] is True
        assert job["running"] is None
        assert job["last_end"]["exit"] == 0
        assert job["last_end"]["outcome"] == "ok"
        assert job["policy"] == "wait"
        assert job["critical"] is True

    def test_command_status_passes_through(self, jobs_env: Any) -> None:
        env, _, _ = jobs_env

        done = meshctl(env, "job", "run", "watchdog", "--", "sh", "-c", "exit 3")

        assert done.returncode == 3
        assert radar(env)["watchdog"]["last_end"]["outcome"] == "failed"

    def test_skip_defers_at_once_without_running(self, jobs_env: Any, tmp_path: Path) -> None:
        """policy skip: held → 75 at once, COMMAND not run, the deferral counted."""
        env, _, _ = jobs_env
        sid = holder(env, "res:gpu-fleet")
        marker = tmp_path / "ran"

        done = meshctl(env, "job", "run", "watchdog", "--", "touch", str(marker))

        assert done.returncode == 75, done.stderr
        assert not marker.exists()
        assert sid in done.stderr
        job = radar(env)["watchdog"]
        assert job["deferrals"] == 1
        assert job["pending"] == []  # not critical: counted, not pending
        assert [h["session_id"] for h in job["would_wait_for"]] == [sid]

    def test_critical_deferral_is_never_silent(self, jobs_env: Any) -> None:
        """policy wait, critical: held past its timeout → 75, pending in jobs and sync
        (naming who held what) until the next successful run."""
        env, _, proj = jobs_env
        sid = holder(env, str(proj))

        done = meshctl(env, "job", "run", "backup", "--held-exit", "0", "--", "true")

        assert done.returncode == 0, done.stderr  # --held-exit 0
        assert "critical" in done.stderr
        pending = radar(env)["backup"]["pending"]
        assert len(pending) == 1
        assert pending[0]["holders"][0]["session_id"] == sid
        assert pending[0]["holders"][0]["task"] == "refactor auth"
        human = meshctl(env, "jobs")
        assert "NOT RUN (critical)" in human.stdout
        assert "held by" not in human.stdout  # "held: S holds RES …", not "held by S holds"
        synced = meshctl(env, "sync", "--session", sid, "--json")
        assert [j["name"] for j in json.loads(synced.stdout)["deferred_jobs"]] == ["backup"]
        assert "Critical jobs NOT RUN" in meshctl(env, "sync", "--session", sid).stdout

        assert meshctl(env, "release", "--session", sid).returncode == 0
        assert meshctl(env, "job", "run", "backup", "--", "true").returncode == 0

        assert radar(env)["backup"]["pending"] == []
        assert (
            json.loads(meshctl(env, "sync", "--session", sid, "--json").stdout)["deferred_jobs"]
            == []
        )

    def test_unknown_job_names_the_known_ones(self, jobs_env: Any) -> None:
        env, _, _ = jobs_env

        done = meshctl(env, "job", "run", "nightly", "--json", "--", "true")

        assert done.returncode == 1
        err = json.loads(done.stdout)["error"]
        assert err["data"]["code"] == "NOT_FOUND"
        assert err["data"]["known"] == ["backup", "report", "watchdog"]
        assert "known jobs: backup, report, watchdog" in done.stderr

    def test_radar_survives_a_restart(self, jobs_env: Any) -> None:
        env, d, _ = jobs_env
        assert meshctl(env, "job", "run", "watchdog", "--", "true").returncode == 0

        d.kill()
        d.start()

        assert radar(env)["watchdog"]["last_end"]["exit"] == 0


class TestOnceJob:
    def test_a_daily_job_runs_once_per_day(self, jobs_env: Any, tmp_path: Path) -> None:
        """once = "daily": the ledger key job:report:<UTC day> is reserved first; a second
        run the same day exits 75 without running; a failed run frees the slot."""
        env, _, _ = jobs_env
        marker = tmp_path / "runs"
        append = ["sh", "-c", f"echo run >> {marker}"]
        day = time.strftime("%Y-%m-%d", time.gmtime())

        failed = meshctl(env, "job", "run", "report", "--", "sh", "-c", "exit 4")
        first = meshctl(env, "job", "run", "report", "--", *append)
        second = meshctl(env, "job", "run", "report", "--", *append)

        assert failed.returncode == 4  # freed: the slot may run again
        assert first.returncode == 0, first.stderr
        assert second.returncode == 75, second.stderr
        assert marker.read_text() == "run\n"
        assert "job report" in second.stderr
        assert "job report: meshctl:" not in second.stderr  # one prefix, not two
        listed = json.loads(meshctl(env, "once", "--list", "--json").stdout)
        assert [(e["key"], e["state"]) for e in listed] == [(f"job:report:{day}", "done")]


class TestKilledRun:
    def test_kill_9_of_run_and_command_shows_died(self, jobs_env: Any) -> None:
        """`job run` and COMMAND killed with SIGKILL: the run ends as died, waiters wake."""
        env, _, _ = jobs_env
        proc = subprocess.Popen(
            [sys.executable, "-m", "meshctl.cli", "job", "run", "watchdog", "--",
             "sleep", "600"],
            env=env, start_new_session=True,
        )  # fmt: skip
        try:
            assert wait_for(lambda: radar(env)["watchdog"]["running"] is not None)
            waiter = subprocess.Popen(
                [sys.executable, "-m", "meshctl.cli", "job", "wait", "watchdog", "--timeout",
                 "60", "--json"],
                env=env, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # run and COMMAND, on every path
            proc.wait(timeout=60)

        with reaped(waiter):
            out, _ = waiter.communicate(timeout=90)
        assert waiter.returncode == 0
        # parked before the kill: woken by the end; or asked after it: told at once
        assert json.loads(out)["last_end"]["outcome"] == "died"
        job = radar(env)["watchdog"]
        assert job["running"] is None
        assert job["last_end"]["outcome"] == "died"


class TestJobWait:
    def test_wait_times_out_with_75_then_sees_the_end(self, jobs_env: Any) -> None:
        """The job runs until the test lets it end: a fixed ``sleep 3`` ended before the
        short wait asked, on a loaded machine (it exited 0: "not running")."""
        env, _, proj = jobs_env
        go = proj / "go"
        proc = subprocess.Popen(
            [sys.executable, "-m", "meshctl.cli", "job", "run", "watchdog", "--",
             "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done"],
            env=env,
        )  # fmt: skip
        try:
            assert wait_for(lambda: radar(env)["watchdog"]["running"] is not None)

            short = meshctl(env, "job", "wait", "watchdog", "--timeout", "0.2")
            go.touch()
            long = meshctl(env, "job", "wait", "watchdog", "--timeout", "30", "--json")
        finally:  # the job ends even when the test failed (left running, it warned later)
            go.touch()
            code = proc.wait(timeout=30)

        assert short.returncode == 75
        assert "the wait ran out after 0.2 s; job watchdog is still running" in short.stderr
        assert short.stdout == ""
        assert long.returncode == 0, long.stderr
        assert json.loads(long.stdout)["last_end"]["exit"] == 0
        assert code == 0

    def test_not_running_answers_at_once(self, jobs_env: Any) -> None:
        env, _, _ = jobs_env

        done = meshctl(env, "job", "wait", "backup", "--json")

        assert done.returncode == 0
        assert json.loads(done.stdout)["was_running"] is False


class TestManifest:
    def test_bad_manifest_refused_at_start(self, mesh_env: MeshEnv) -> None:
        """An unknown policy stops the daemon with the table and key named."""
        mesh_env.write_config('[jobs.x]\nresources = ["res:a"]\npolicy = "sometimes"\n')
        d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)

        with pytest.raises(RuntimeError) as info:
            d.start()

        assert "jobs.x.policy" in str(info.value)
        assert "'wait' or 'skip'" in str(info.value)

    def test_bad_resource_refused_on_reload_keeps_old_config(self, jobs_env: Any) -> None:
        env, _, _ = jobs_env
        Path(env["MESH_CONFIG"]).write_text('[jobs.y]\nresources = ["relative/path"]\n')

        done = meshctl(env, "daemon", "reload")

        assert done.returncode == 1
        assert "jobs.y.resources" in done.stderr
        assert set(radar(env)) == {"backup", "report", "watchdog"}
