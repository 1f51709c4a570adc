"""``export MESH_SESSION=$(meshctl register … 2>/dev/null)``: the idiom the CLI's own
hints teach, with a redirection inside the substitution. bash then runs meshctl in a
subshell it forks (it does not exec meshctl in its place), the subshell exits once the
id is read, and the session registered for it ended at once: the next command said
"session … ended: its process died". SPEC §4: register is on behalf of its caller,
which here is the shell the subshell was forked from."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from .test_conformance_audit import Daemon, as_

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

SCRIPT = r"""
set -e
export MESH_SESSION=$("$PY" -m meshctl.cli register --task "fix the parser" 2>/dev/null)
"$PY" -m meshctl.cli claim res:subshell
"$PY" -m meshctl.cli sessions show "$MESH_SESSION" --json
echo "shell $$"
"""


def test_a_session_registered_in_a_command_substitution_lives_with_its_shell(
    daemon: Daemon,
) -> None:
    env = {**as_(daemon), "PY": sys.executable}
    env.pop("MESH_SESSION", None)
    run = subprocess.run(
        ["bash", "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, (run.stdout, run.stderr)
    assert "granted res:subshell" in run.stdout, run.stdout
    shell_pid = int(run.stdout.rsplit("shell ", 1)[1])
    assert f'"pid": {shell_pid}' in run.stdout, run.stdout


TWICE = r"""
set -e
export MESH_SESSION=$("$PY" -m meshctl.cli register --task "first")
echo "first $MESH_SESSION"
export MESH_SESSION=$("$PY" -m meshctl.cli register --task "second" 2>/dev/null)
echo "second $MESH_SESSION"
bash -c 'echo "child $("$PY" -m meshctl.cli register --task child)"'
"$PY" -m meshctl.cli sessions active --json
"""


def test_register_again_in_the_same_shell_reuses_its_live_session(daemon: Daemon) -> None:
    """The idiom run twice in one shell keeps one session (task updated), where it left
    the first one live beside a second; a child process still gets its own."""
    env = {**as_(daemon), "PY": sys.executable}
    env.pop("MESH_SESSION", None)
    run = subprocess.run(["bash", "-c", TWICE], env=env, capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert run.returncode == 0, (run.stdout, run.stderr)
    said = dict(line.split(" ", 1) for line in run.stdout.splitlines()[:3])
    assert said["second"] == said["first"], run.stdout
    assert said["child"] != said["first"], run.stdout
    listed = json.loads(run.stdout.split("\n", 3)[3])
    tasks = {s["session_id"]: s["task"] for s in listed}  # the child's ended with it
    assert tasks == {said["first"]: "second"}
