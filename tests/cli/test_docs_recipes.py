"""The README's first lines and the recipes in docs/OPERATIONS.md, run as a person would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.cli.conftest import Meshctl

ROOT = Path(__file__).resolve().parents[2]


def block(doc: str, lang: str, containing: str) -> str:
    """The first fenced ``lang`` block of ``doc`` that holds ``containing``."""
    for body in re.findall(rf"```{lang}\n(.*?)```", doc, re.S):
        if containing in body:
            return str(body)
    raise AssertionError(f"no {lang} block with {containing!r}")


def test_readme_opens_with_two_commands_that_run_with_bash() -> None:
    readme = (ROOT / "README.md").read_text()
    first = re.search(r"```bash\n(.*?)```", readme, re.S)

    assert first is not None
    commands = [line.split("#")[0].strip() for line in first.group(1).splitlines()]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text().replace(
        "bash scripts/test.sh -q", "bash scripts/test.sh"
    )


def test_readme_installs_with_pipx_not_pip_user() -> None:
    readme = (ROOT / "README.md").read_text()
    install = readme.split("## Install", 1)[1].split("\n## ", 1)[0]

    assert "$ pipx install ." in install
    assert "$ pip install --user" not in install
    assert "externally-managed-environment" in install
    assert "import meshctl" in install  # the library in a project's own venv


def test_pre_commit_hook_recipe_refuses_a_claimed_file(
    meshctl: Meshctl, daemon: Any, mesh_env: Any, short_tmp: Path
) -> None:
    hook = block((ROOT / "docs" / "OPERATIONS.md").read_text(), "sh", "meshctl check")
    repo = short_tmp / "repo"
    repo.mkdir()
    bindir = short_tmp / "bin"
    bindir.mkdir()
    (bindir / "meshctl").write_text(f'#!/bin/sh\nexec {sys.executable} -m meshctl.cli "$@"\n')
    (bindir / "meshctl").chmod(0o755)
    env = {**mesh_env.env, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True,
                              check=False, timeout=60)  # fmt: skip

    git("init", "-q")
    (repo / ".git" / "hooks" / "pre-commit").write_text(hook)
    (repo / ".git" / "hooks" / "pre-commit").chmod(0o755)
    (repo / "a.py").write_text("a\n")
    (repo / "b.py").write_text("b\n")
    holder = meshctl("register", "--task", "holder", "--liveness", "heartbeat", env=env).out
    assert meshctl("claim", str(repo / "a.py"), "--session", holder.strip(), env=env).code == 0

    git("add", "b.py")
    free = git("commit", "-qm", "b")
    git("add", "a.py")
    held = git("commit", "-qm", "a")

    assert free.returncode == 0, free
    assert held.returncode == 1, held
    assert f"held: {holder.strip()} is editing {repo}/a.py" in held.stdout + held.stderr
    assert "another session claims a staged file" in held.stderr
