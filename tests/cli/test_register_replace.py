"""``meshctl register --id X``: a live heartbeat session with no process is taken
over only with ``--replace`` (SPEC §4), and its private notes do not come along."""

from __future__ import annotations

from typing import Any

from tests.cli.conftest import Meshctl


def test_a_process_takes_a_pidless_session_only_with_replace(
    meshctl: Meshctl, daemon: Any, mesh_env: Any
) -> None:
    env = mesh_env.env
    args = ("register", "--task", "t", "--id", "cli:h")
    first = meshctl(*args, "--liveness", "heartbeat", env=env)
    note = meshctl("notes", "add", "--session", "cli:h", "--private", "mine", env=env)

    refused = meshctl(*args, env=env)  # a process (this test's) taking it over
    taken = meshctl(*args, "--replace", "--json", env=env)
    notes = meshctl("notes", "list", "--session", "cli:h", "--json", env=env)

    assert (first.code, note.code) == (0, 0), (first, note)
    assert refused.code == 1, refused
    assert "cli:h is live" in refused.err, refused
    assert "--replace" in refused.err, refused
    assert taken.code == 0, taken
    assert taken.json()["refreshed"] is False, taken
    assert notes.json() == [], notes
