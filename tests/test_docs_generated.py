"""docs/CLI.md and docs/PROTOCOL.md are generated from the code; they must not drift.

When this fails, run ``.venv/bin/python scripts/gen_docs.py`` and commit the two files.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_cli_and_protocol_references_are_current() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert done.returncode == 0, (
        f"{done.stderr}\nthe generated references drifted from the code: run "
        "`.venv/bin/python scripts/gen_docs.py` and commit docs/CLI.md and docs/PROTOCOL.md"
    )
