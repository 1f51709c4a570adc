"""Issue 9's CLI items and issue 10's terminal hygiene, through the real daemon.

Each test names the defect it guards; each ran against the code before its fix
and failed there.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .conftest import Meshctl, Run

Daemon = Any


def ok(run: Run) -> Run:
    assert run.code == 0, run
    return run


def register(meshctl: Meshctl, env: dict[str, str], task: str = "t") -> str:
    """A process session tied to this test process; its id."""
    return ok(meshctl("register", "--task", task, "--pid", str(os.getpid()), env=env)).out.strip()


class TestRunIdentity:
    def test_command_gets_runs_own_session(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """Issue 9.8: COMMAND sees run's session in MESH_SESSION, a child of the parent's."""
        parent = register(meshctl, daemon.env)
        env = {**daemon.env, "MESH_SESSION": parent}
        script = 'echo "$MESH_SESSION"; "$0" -m meshctl.cli sessions show "$MESH_SESSION" --json'

        run = ok(
            meshctl("run", "--res", "res:job", "--", "sh", "-c", script, sys.executable, env=env)
        )

        inner, _, shown = run.out.partition("\n")
        assert inner
        assert inner != parent
        assert f'"parent": "{parent}"' in shown
        assert '"source": "run"' in shown
