"""Fourth conformance audit, SPEC §1 and §9: the command line driven as a user drives it,
against a real daemon; each test a defect found that way (docs/CONFORMANCE.md)."""

from __future__ import annotations

import subprocess
import sys


def test_python_dash_m_meshctl_runs_the_cli() -> None:
    """SPEC §1: ``meshctl`` is importable as ``meshctl`` and its CLI is ``meshctl …``;
    ``python -m meshd`` runs the daemon's command line, so ``python -m meshctl`` runs
    the CLI (a venv whose scripts folder is not on PATH)."""
    done = subprocess.run(
        [sys.executable, "-m", "meshctl", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("meshctl, version ")
