"""`meshctl --help` lists every command with its whole summary (issue 15.6)."""

from __future__ import annotations

from tests.cli.conftest import Meshctl


def test_summaries_are_not_cut_off(meshctl: Meshctl) -> None:
    r = meshctl("--help")

    assert r.code == 0, r
    commands = r.out.split("Commands:", 1)[1]
    assert "..." not in commands
    assert "claim " in commands
    assert "Session Mesh plugin into Hermes Agent profiles" in commands
