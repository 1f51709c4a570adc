"""A short run of the atheris harness (fuzz_atheris.py), when atheris is installed.

atheris is in the test extra on Linux x86_64 (where it has wheels); elsewhere this
file is skipped with that reason.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris", reason="atheris is not installed (pip install atheris)")

HARNESS = Path(__file__).with_name("fuzz_atheris.py")


def test_decoders_survive_a_short_atheris_run() -> None:
    """20,000 coverage-guided inputs: decoders raise only what the server handles."""
    out = subprocess.run(
        [sys.executable, str(HARNESS), "-runs=20000", "-max_total_time=20"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert out.returncode == 0, out.stderr[-3000:]
    assert "Done 20000 runs" in out.stderr or "DONE" in out.stderr
