"""What ``meshctl claim --wait`` says when its wait is withdrawn by a pause.

docs/CONFORMANCE.md §5b: a pausing session's queued waits are withdrawn at the pause
and answered ``held`` with the holders they waited behind. The CLI told such a wait
from one that ran out only by its empty holders (a session's end withdraws with
none), so a wait withdrawn by a pause said "the wait ran out after 0.5 s; still held"
-- it had not run out -- where CONFORMANCE says it says it was withdrawn.
"""

from __future__ import annotations

from .conftest import Meshctl
from .test_conformance_audit import Daemon, as_, ok, queued_claim


def test_a_wait_withdrawn_by_a_pause_says_so(meshctl: Meshctl, daemon: Daemon) -> None:
    waiting = queued_claim(meshctl, daemon)

    ok(meshctl("pause", "--note", "stopping here", env=as_(daemon, "cli:waiter")))
    out, err = waiting.communicate(timeout=30)

    assert waiting.returncode == 75, (out, err)
    assert "withdrawn" in err, err
    assert "paused" in err, err
    assert "ran out" not in err, err
