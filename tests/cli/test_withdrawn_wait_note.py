"""What ``meshctl claim --wait`` says when its wait is withdrawn by a pause.

docs/CONFORMANCE.md §5b: a pausing session's queued waits are withdrawn at the pause
and answered ``held`` with the holders they waited behind. The CLI told such a wait
from one that ran out only by its empty holders (a session's end withdraws with
none), so a wait withdrawn by a pause said "the wait ran out after 0.5 s; still held"
-- it had not run out -- where CONFORMANCE says it says it was withdrawn.
"""

from __future__ import annotations

import subprocess
import sys

from tests.support import wait_for

from .conftest import Meshctl
from .test_conformance_audit import Daemon, as_, ok, register


def test_a_wait_withdrawn_by_a_pause_says_so(meshctl: Meshctl, daemon: Daemon) -> None:
    register(meshctl, daemon, "cli:holder")
    register(meshctl, daemon, "cli:waiter")
    ok(meshctl("claim", "res:db", env=as_(daemon, "cli:holder")))
    waiting = subprocess.Popen(
        [sys.executable, "-m", "meshctl.cli", "claim", "res:db", "--wait", "60"],
        env=as_(daemon, "cli:waiter"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(
        lambda: daemon.call("claim.list", {})["result"].get("waiting"),
        what="the queued wait",
    )

    ok(meshctl("pause", "--note", "stopping here", env=as_(daemon, "cli:waiter")))
    out, err = waiting.communicate(timeout=30)

    assert waiting.returncode == 75, (out, err)
    assert "withdrawn" in err, err
    assert "paused" in err, err
    assert "ran out" not in err, err
