"""``meshctl resume`` (SPEC §5b) of a session that is paused, and of one that is not.

It printed "resumed" for a session that had never paused. Now it says plainly that
there was nothing to resume (exit 0: the session is not paused, which is what resume
is for; docs/CONFORMANCE.md, "resume of a session that is not paused"), and ``--json``
says so in ``was_paused``.
"""

from __future__ import annotations

import os

from tests.conftest import DaemonHandle

from .conftest import Meshctl, Run


def _ok(run: Run) -> Run:
    assert run.code == 0, run
    return run


def _as(daemon: DaemonHandle, sid: str) -> dict[str, str]:
    return {**daemon.env, "MESH_SESSION": sid}


def _register(meshctl: Meshctl, daemon: DaemonHandle, sid: str) -> dict[str, str]:
    _ok(meshctl("register", "--task", "t", "--id", sid, "--pid", str(os.getpid()), env=daemon.env))
    return _as(daemon, sid)


def test_resume_of_a_session_not_paused_says_so(meshctl: Meshctl, daemon: DaemonHandle) -> None:
    """Fails before: it printed "resumed" and "note: (no checkpoint note)"."""
    me = _register(meshctl, daemon, "cli:busy")

    human = _ok(meshctl("resume", env=me))
    doc = _ok(meshctl("resume", "--json", env=me)).json()

    assert human.out.strip() == "cli:busy was not paused: nothing to resume"
    assert "resumed" not in human.out
    assert doc["was_paused"] is False
    assert doc["status"] == "resumed"  # the daemon's answer, kept as it is


def test_resume_of_a_paused_session(meshctl: Meshctl, daemon: DaemonHandle) -> None:
    me = _register(meshctl, daemon, "cli:p")
    _ok(meshctl("claim", "res:p", env=me))
    _ok(meshctl("pause", "--note", "at step 3", env=me))

    doc = _ok(meshctl("resume", "--wait", "5", "--json", env=me)).json()
    again = _ok(meshctl("resume", env=me))

    assert doc["was_paused"] is True
    assert (doc["status"], doc["note"], doc["resources"]) == ("resumed", "at step 3", ["res:p"])
    assert again.out.strip() == "cli:p was not paused: nothing to resume"


def test_paused_holding_nothing_resumes(meshctl: Meshctl, daemon: DaemonHandle) -> None:
    """Paused with no claim (nothing reserved): still a pause to resume from."""
    me = _register(meshctl, daemon, "cli:idle")
    _ok(meshctl("pause", "--note", "lunch", env=me))

    human = _ok(meshctl("resume", env=me))

    assert human.out.splitlines() == ["resumed", "note: lunch"]


def test_a_status_paused_by_heartbeat_lost_no_reservation(
    meshctl: Meshctl, daemon: DaemonHandle
) -> None:
    """``heartbeat --status paused`` sets the status only (SPEC §4 lists it); no
    ``pause`` reserved anything. ``resume`` said "resumed (the reservation was lost in a
    daemon restart)", and ``--json`` ``reservation: "lost"``, with no restart and nothing
    reserved (fails before). A pause a restart came after still says lost
    (tests/integration/test_preempt.py)."""
    me = _register(meshctl, daemon, "cli:marked")
    _ok(meshctl("heartbeat", "--status", "paused", env=me))

    doc = _ok(meshctl("resume", "--json", env=me)).json()

    assert doc["was_paused"] is True, doc
    assert (doc["status"], doc["reservation"]) == ("resumed", "none"), doc
    _ok(meshctl("heartbeat", "--status", "paused", env=me))
    human = _ok(meshctl("resume", env=me))
    assert "daemon restart" not in human.out, human
    assert human.out.splitlines()[0] == "resumed", human
