"""A command that starts the daemon says so on stderr; one that finds it running says nothing."""

from __future__ import annotations

from typing import Any

from tests.cli.conftest import Meshctl


def test_starting_the_daemon_is_said_on_stderr(meshctl: Meshctl, mesh_env: Any) -> None:
    env = {**mesh_env.env, "MESH_SPAWN": "direct"}
    try:
        first = meshctl("sessions", "active", env=env)
        second = meshctl("sessions", "active", env=env)
    finally:
        meshctl("daemon", "stop", env=env)

    assert first.code == 0, first
    assert "started meshd for profile test" in first.err
    assert str(mesh_env.state_dir / "test.log") in first.err
    assert first.out.strip() == "No active sessions (profile test)."
    assert second.code == 0, second
    assert "started meshd" not in second.err


def test_a_daemon_that_fails_to_start_is_not_said_to_have_started(
    meshctl: Meshctl, mesh_env: Any
) -> None:
    """Say "started meshd" only once the daemon answered: one that exits at once (a config
    it refuses) gets the failure and the end of its log, not a note that it started."""
    mesh_env.write_config("[defaults]\nno_such_key = 1\n")
    env = {**mesh_env.env, "MESH_SPAWN": "direct"}

    run = meshctl("sessions", "active", env=env)

    assert run.code != 0, run
    assert "started meshd" not in run.err
    assert "could not start meshd for profile 'test'" in run.err
    assert "no_such_key" in run.err


def test_a_failed_start_says_its_own_reason_only(meshctl: Meshctl, mesh_env: Any) -> None:
    """The log is appended to by every start: a failed start quotes the refusal of
    this start alone, as its first line, not the tail of the log with an earlier
    start's refusal (a config since corrected) above it."""
    env = {**mesh_env.env, "MESH_SPAWN": "direct"}
    mesh_env.write_config("[defaults]\nearlier_typo = 1\n")
    meshctl("sessions", "active", env=env)
    mesh_env.write_config("[defaults]\nstale_after = 'soon'\n")

    run = meshctl("sessions", "active", env=env)

    assert run.code == 69, run
    first, *rest = run.err.splitlines()
    assert first == (
        f"meshctl: could not start meshd for profile 'test': {mesh_env.config}: "
        "key `defaults.stale_after`: Expected `float`, got `str`"
    ), run
    assert "earlier_typo" not in run.err
    assert len(rest) == 1, run
    assert "exited with status 1" in rest[0]


def test_a_refusal_keeps_the_fix_on_its_next_lines(meshctl: Meshctl, mesh_env: Any) -> None:
    """Some refusals say the fix on indented lines after the sentence (a damaged
    database: the mv that moves it aside); those lines stay with it."""
    env = {**mesh_env.env, "MESH_SPAWN": "direct"}
    mesh_env.state_dir.mkdir(mode=0o700, exist_ok=True)
    db = mesh_env.state_dir / "test.sqlite3"
    db.write_bytes(b"this is not a database" * 100)

    run = meshctl("sessions", "active", env=env)

    assert run.code == 69, run
    lines = run.err.splitlines()
    assert lines[0].startswith(f"meshctl: could not start meshd for profile 'test': {db} is not")
    assert lines[1] == f"  Move it aside to start afresh: mv '{db}' '{db}.broken'", run
    assert "exited with status 1" in lines[2]


def test_daemon_start_says_it_started_once(meshctl: Meshctl, mesh_env: Any) -> None:
    """``daemon start`` says what it started on stdout; the note other commands give on
    stderr when they start one was said as well, a second time (found trying Hermes)."""
    env = {**mesh_env.env, "MESH_SPAWN": "direct"}
    try:
        run = meshctl("daemon", "start", env=env)
    finally:
        meshctl("daemon", "stop", env=env)

    assert run.code == 0, run
    assert run.out.startswith("meshd started: profile test, pid "), run
    assert "started meshd" not in run.err, run
