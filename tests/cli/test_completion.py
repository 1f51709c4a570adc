"""Shell completion: `run --<TAB>` lists options (was a usage error), session ids and held
keys come from the running daemon, and `meshctl completion install` writes the script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.cli.conftest import Meshctl


def complete(env: dict[str, str], line: str) -> list[str]:
    """What bash completion offers for ``line`` (click's bash_complete protocol)."""
    words = line.split(" ")
    done = subprocess.run(
        [sys.executable, "-m", "meshctl.cli"],
        env={**env, "_MESHCTL_COMPLETE": "bash_complete", "COMP_WORDS": line,
             "COMP_CWORD": str(len(words) - 1)},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [row.split(",", 1)[1] for row in done.stdout.splitlines() if "," in row]


def test_options_after_run_and_once(mesh_env: Any) -> None:
    """`run --<TAB>` and `once --<TAB>` offer their options instead of a usage error."""
    assert "--res" in complete(mesh_env.env, "meshctl run --")
    assert "--key" in complete(mesh_env.env, "meshctl once --")
    assert "--held-exit" in complete(mesh_env.env, "meshctl job run --")


def test_session_ids_and_held_keys(meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
    env = mesh_env.env
    sid = meshctl("register", "--task", "t", "--liveness", "heartbeat", env=env).out.strip()
    assert meshctl("claim", "--session", sid, "res:deploy", env=env).code == 0

    assert sid in complete(env, "meshctl sessions show ")
    assert sid in complete(env, f"meshctl send {sid[:4]}")
    assert sid in complete(env, "meshctl --session ")
    assert complete({**env, "MESH_SESSION": sid}, "meshctl release ") == ["res:deploy"]


def test_no_daemon_completes_nothing_quietly(mesh_env: Any) -> None:
    env = {**mesh_env.env, "MESH_SPAWN": "direct"}

    assert complete(env, "meshctl sessions show ") == []
    assert not Path(env["MESH_SOCKET"]).exists()  # never started one to complete


def test_install_writes_the_script(meshctl: Meshctl, short_tmp: Path, mesh_env: Any) -> None:
    env = {**mesh_env.env, "HOME": str(short_tmp), "XDG_DATA_HOME": "", "SHELL": "/bin/bash"}

    r = meshctl("completion", "install", "--json", env=env)

    assert r.code == 0, r
    path = short_tmp / ".local/share/bash-completion/completions/meshctl"
    assert r.json() == {"shell": "bash", "path": str(path)}
    text = path.read_text()
    assert "_MESHCTL_COMPLETE=bash_complete" in text
    done = subprocess.run(["bash", "-n", str(path)], check=False)
    assert done.returncode == 0
    assert os.access(path, os.R_OK)


def test_paths_for_run_res_and_the_board(mesh_env: Any) -> None:
    """`run --res <TAB>` and `board changed|touch|watch <TAB>` complete paths (the shell's
    file completion), as `claim` and `check` do; they completed nothing."""

    def kinds(line: str) -> list[str]:
        words = line.split(" ")
        done = subprocess.run(
            [sys.executable, "-m", "meshctl.cli"],
            env={**mesh_env.env, "_MESHCTL_COMPLETE": "bash_complete", "COMP_WORDS": line,
                 "COMP_CWORD": str(len(words) - 1)},
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        return [row.split(",", 1)[0] for row in done.stdout.splitlines()]

    assert kinds("meshctl claim sr") == ["file"]
    for line in ("meshctl run --res sr", "meshctl board changed sr", "meshctl board touch sr",
                 "meshctl board watch sr", "meshctl board files sr"):  # fmt: skip
        assert kinds(line) == ["file"], line
