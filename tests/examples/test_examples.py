"""The examples run, end to end, against a real daemon (no person in between)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
Daemon = Any


def test_the_pipeline_orders_itself(daemon: Daemon, short_tmp: Path) -> None:
    """research -> code -> review, started at once in reverse order: each waits for the
    signal before it, the reviewer's question is answered by the coder itself, and the
    researcher's private hunch reaches no one."""
    env = {**daemon.env, "PIPELINE_DIR": str(short_tmp), "PYTHON": sys.executable}

    done = subprocess.run(
        [str(EXAMPLES / "pipeline" / "run.sh"), "t1"], env=env, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert "code: wrote report_client.py from 1 note(s)" in done.stdout
    assert "review: asked the coder, it answered (session): I send an Idempotency-Key" in (
        done.stdout
    )
    assert "review: approved" in done.stdout
    assert "code: review says {'verdict': 'approved'}" in done.stdout
    assert "Idempotency-Key" in (short_tmp / "report_client.py").read_text()


def test_two_cron_jobs_send_one_daily_report(daemon: Daemon, short_tmp: Path) -> None:
    log = short_tmp / "sent.log"
    bindir = str(Path(sys.executable).parent)  # meshctl of this environment
    env = {
        **daemon.env,
        "REPORT_LOG": str(log),
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
    }
    job = str(EXAMPLES / "daily-report" / "job.sh")

    jobs = [subprocess.Popen([job, name], env=env, stderr=subprocess.PIPE, text=True)
            for name in ("cron-a", "cron-b")]  # fmt: skip
    codes = sorted(p.wait(timeout=60) for p in jobs)
    for p in jobs:
        p.communicate()
    again = subprocess.run([job, "cron-c"], env=env, capture_output=True, text=True, timeout=60)

    assert codes == [0, 75]
    assert again.returncode == 75
    assert "is done" in again.stderr
    assert len(log.read_text().splitlines()) == 1
