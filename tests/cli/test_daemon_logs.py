"""``meshctl daemon logs [-f]``: the log of a daemon meshctl started (the state folder's
file here: no systemd unit runs it)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from tests.cli.conftest import Meshctl


def test_logs_prints_and_follows_the_state_folders_log(meshctl: Meshctl, offline_env: Any) -> None:
    env = offline_env.env
    none = meshctl("daemon", "logs", env=env)
    assert meshctl("daemon", "start", env=env).code == 0
    try:
        shown = meshctl("daemon", "logs", "-n", "5", env=env)
        follow = subprocess.Popen([sys.executable, "-m", "meshctl.cli", "daemon", "logs", "-f",
                                   "-n", "1"], env=env, stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert meshctl("daemon", "reload", env=env).code == 0
            assert follow.stdout is not None
            seen = []
            while not any("config reloaded from" in line for line in seen):
                line = follow.stdout.readline()  # -f prints the reload's line as it is logged
                assert line, seen
                seen.append(line)
        finally:
            follow.terminate()
            follow.communicate(timeout=10)
    finally:
        meshctl("daemon", "stop", env=env)

    assert none.code == 1, none
    assert "no log for profile default:" in none.err
    assert shown.code == 0, shown
    assert 0 < len(shown.out.splitlines()) <= 5
