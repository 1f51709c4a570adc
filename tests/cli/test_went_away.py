"""The daemon killed (``kill -9``) while a command waits on it: `claim --wait`,
`signal wait`, `run --wait`.

They exited 69 with "meshd closed the connection before replying (… the call may or
may not have taken effect); retry". SPEC §9's 69 is "the daemon cannot be reached
and could not be started": this one was reached, and the next command starts one
again. Now they exit 1 and say what happened -- the daemon went away while waiting,
the claim was not granted (no signal was received) -- and start no daemon on the way
out (`signal`/`run` ended their own session through a new one). `run --fail-open`
does not run COMMAND unguarded then: the claim it waited on may still be held once a
daemon is back (docs/CONFORMANCE.md, "a daemon that goes away during a wait").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import DaemonHandle, rpc
from tests.support import reaped, wait_for


def _start(daemon: DaemonHandle, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "meshctl.cli", *args],
        env={**daemon.env, "MESH_SPAWN": "direct"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _counts(daemon: DaemonHandle) -> dict[str, int]:
    return daemon.call("mesh.info")["result"]["counts"]  # type: ignore[no-any-return]


def _answers(sock: Path) -> bool:
    try:
        return "result" in rpc(sock, "mesh.ping")
    except OSError:
        return False


@pytest.fixture
def held(daemon: DaemonHandle) -> DaemonHandle:
    """res:x held by `holder`; `waiter` is a lasting session of its own."""
    for sid in ("holder", "waiter"):
        assert "result" in daemon.call("session.register", {"session_id": sid})
    got = daemon.call("claim.acquire", {"session_id": "holder", "resources": ["res:x"]})
    assert got["result"]["status"] == "granted", got
    return daemon


def _no_daemon_started(daemon: DaemonHandle) -> None:
    """Nothing answers at the socket (a daemon started on the way out is stopped)."""
    try:
        assert not _answers(daemon.socket), "a daemon was started on the way out"
    finally:
        if _answers(daemon.socket):
            subprocess.run(
                [sys.executable, "-m", "meshctl.cli", "daemon", "stop"],
                env=daemon.env, capture_output=True, timeout=60, check=False,
            )  # fmt: skip


def _killed_while(daemon: DaemonHandle, proc: subprocess.Popen[str], count: str) -> Any:
    """Kill the daemon once the command's wait is parked in it (``count`` in mesh.info)."""
    with reaped(proc):  # killed, awaited and its pipes closed if the wait was never seen
        wait_for(lambda: _counts(daemon)[count] == 1, what=f"{count} == 1")
        daemon.kill()
        out, err = proc.communicate(timeout=60)
    _no_daemon_started(daemon)
    return proc.returncode, out, err


def test_claim_wait(held: DaemonHandle) -> None:
    proc = _start(held, "claim", "res:x", "--wait", "120", "--session", "waiter", "--json")

    code, out, err = _killed_while(held, proc, "waiters")

    assert code == 1, (code, out, err)
    assert err.startswith("meshctl: meshd went away while this claim waited"), err
    assert "the claim was not granted" in err
    assert "run the command again" in err
    assert "Traceback" not in err
    error = json.loads(out)["error"]
    assert error["data"]["code"] == "UNAVAILABLE"
    assert error["data"]["went_away"] is True


def test_signal_wait(daemon: DaemonHandle) -> None:
    proc = _start(daemon, "signal", "wait", "sig-x", "--timeout", "120")

    code, out, err = _killed_while(daemon, proc, "signal_waits")

    assert code == 1, (code, out, err)
    assert err.startswith("meshctl: meshd went away while waiting for the signal"), err
    assert "no signal sig-x was received" in err
    assert "started meshd" not in err
    assert out == ""


def test_run_wait_does_not_fail_open(held: DaemonHandle, tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    proc = _start(
        held, "run", "--res", "res:x", "--wait", "120", "--fail-open", "--", "touch", str(ran)
    )

    code, out, err = _killed_while(held, proc, "waiters")

    assert code == 1, (code, out, err)
    assert "meshd went away while this claim waited" in err
    assert "UNGUARDED" not in err
    assert not ran.exists()


# --- the daemon goes away while COMMAND runs -------------------------------------------


def _run_killing(daemon: DaemonHandle, *args: str) -> tuple[int, str, str]:
    """Run ``meshctl ARGS -- sh -c 'kill -9 <meshd>; exit 3'``: COMMAND itself kills the
    daemon, so everything the command sends afterwards finds none running."""
    assert daemon.proc is not None
    command = ("sh", "-c", f"kill -9 {daemon.proc.pid}; echo ran; exit 3")
    proc = _start(daemon, *args, "--", *command)
    out, err = proc.communicate(timeout=60)
    daemon.proc.wait(timeout=15)
    _no_daemon_started(daemon)
    return proc.returncode, out, err


def _not_sent(err: str) -> str:
    """The one note that says what could not be sent on the way out."""
    lines = [line for line in err.splitlines() if "not sent:" in line]
    assert len(lines) == 1, err
    assert "started meshd" not in err
    assert "Traceback" not in err
    return lines[0]


def test_job_run_starts_no_daemon_to_end_its_session(daemon: DaemonHandle, tmp_path: Path) -> None:
    """`job run` recorded the job's end, its ledger slot and the session's end through a
    daemon it started only for that (fails before: a new meshd answered afterwards)."""
    Path(daemon.env["MESH_CONFIG"]).write_text(
        '[jobs.backup]\nresources = ["res:disk"]\nonce = "daily"\n'
    )
    assert "result" in daemon.call("mesh.reload")

    code, out, err = _run_killing(daemon, "job", "run", "backup")

    assert code == 3, (code, out, err)  # COMMAND's status, as SPEC §9 says of run
    assert out == "ran\n"
    said = _not_sent(err)
    assert "the end of job backup (exit 3)" in said
    assert "the outcome of job:backup:" in said
    assert "once --resolve job:backup:" in said
    assert "the end of session cron:" in said


def test_run_starts_no_daemon_to_end_its_session(daemon: DaemonHandle) -> None:
    code, out, err = _run_killing(daemon, "run", "--res", "res:x")

    assert code == 3, (code, out, err)
    assert "the end of session run:" in _not_sent(err)


def test_once_starts_no_daemon_to_record_its_outcome(daemon: DaemonHandle) -> None:
    code, out, err = _run_killing(daemon, "once", "--key", "report:1")

    assert code == 3, (code, out, err)
    said = _not_sent(err)
    assert "the outcome of report:1 (free;" in said
    assert "the end of session once:" in said
