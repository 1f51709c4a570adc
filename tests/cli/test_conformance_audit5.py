"""Fifth conformance audit: the command line met as a new user meets it (README top to
bottom, every example of SPEC §2, §4 to §7, §9), against a real daemon; each test a
defect found that way (docs/CONFORMANCE.md)."""

from __future__ import annotations

from .conftest import Meshctl
from .test_conformance_audit import Daemon, ok, register  # the first audit's helpers


def test_sessions_active_names_the_source_an_id_does_not_say(
    meshctl: Meshctl, daemon: Daemon
) -> None:
    """SPEC §4 gives every session a ``source``; a Hermes session's id is Hermes's own,
    so ``sessions active`` showed a CLI session and a gateway chat alike. The human line
    adds the source after an id that does not start with it; ``--json`` is unchanged."""
    register(meshctl, daemon, "20261201_101010_ab12cd", "--source", "gateway:telegram")
    register(meshctl, daemon, "20261201_101011_ef34ab", "--source", "cli")
    register(meshctl, daemon, "cli:20261129-1f3a9c", "--source", "cli")

    human = ok(meshctl("sessions", "active", env=daemon.env)).out
    listed = ok(meshctl("sessions", "active", "--json", env=daemon.env)).json()

    assert "- 20261201_101010_ab12cd (gateway:telegram) — t," in human, human
    assert "- 20261201_101011_ef34ab (cli) — t," in human, human
    assert "- cli:20261129-1f3a9c — t," in human, human  # the id says it already
    assert {s["session_id"]: s["source"] for s in listed}["20261201_101010_ab12cd"] == (
        "gateway:telegram"
    )
