"""Helpers for the ``meshctl`` tests: run the real command line in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

MESH_VARS = ("MESH_SOCKET", "MESH_STATE_DIR", "MESH_CONFIG", "MESH_PROFILE", "MESH_SESSION")


@dataclass
class Run:
    """One finished ``meshctl`` run."""

    args: list[str]
    code: int
    out: str
    err: str

    def json(self) -> Any:
        """stdout as the one JSON document it must be."""
        return json.loads(self.out)

    def __str__(self) -> str:
        head = f"meshctl {' '.join(self.args)} -> {self.code}"
        return f"{head}\nstdout:\n{self.out}\nstderr:\n{self.err}"


class Meshctl(Protocol):
    def __call__(
        self, *args: str, env: Mapping[str, str] | None = None, input: str | None = None
    ) -> Run: ...


def run_meshctl(*args: str, env: Mapping[str, str] | None = None, input: str | None = None) -> Run:
    """Run ``python -m meshctl.cli ARGS`` with ``env`` (default: this process's) and wait."""
    done = subprocess.run(
        [sys.executable, "-m", "meshctl.cli", *args],
        env=dict(os.environ if env is None else env),
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return Run(list(args), done.returncode, done.stdout, done.stderr)


@pytest.fixture
def meshctl() -> Meshctl:
    """The command line, as a function: ``meshctl("sessions", "active", "--json")``."""
    return run_meshctl


@dataclass
class OfflineEnv:
    """A private folder where no daemon runs (and none may be started)."""

    root: Path
    socket: Path
    state_dir: Path
    env: dict[str, str]


@pytest.fixture
def offline_env() -> Iterator[OfflineEnv]:
    """An environment whose socket and state live in a short private temp folder.

    For the tests that must not reach any daemon; the folder is short because
    ``sun_path`` is.
    """
    root = Path(tempfile.mkdtemp(prefix="mc-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if k not in MESH_VARS}
    runtime = root / "run"
    runtime.mkdir(mode=0o700)
    env.update(
        MESH_SOCKET=str(root / "run" / "meshd" / "off.sock"),
        MESH_STATE_DIR=str(root / "state"),
        MESH_CONFIG=str(root / "config.toml"),
        XDG_RUNTIME_DIR=str(runtime),
        MESH_SPAWN="direct",
    )
    try:
        yield OfflineEnv(root, Path(env["MESH_SOCKET"]), root / "state", env)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def tmux(short_tmp: Path) -> Iterator[Any]:
    """``tmux(*args)``: a private tmux server for driving a command on a real terminal."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    sock = str(short_tmp / "tmux.sock")

    def run(*args: str) -> str:
        done = subprocess.run(
            ["tmux", "-S", sock, *args], capture_output=True, text=True, check=False, timeout=10
        )
        return done.stdout

    yield run
    run("kill-server")
