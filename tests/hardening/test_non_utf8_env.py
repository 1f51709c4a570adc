"""Paths from the environment whose names are not UTF-8 (``MESH_SOCKET=$'/tmp/x\\xff/s'``).

Python reads such bytes with lone surrogates (``surrogateescape``). The daemon bound
the socket, then failed with a traceback writing its path into the state folder (a
non-UTF-8 state folder: in SQLite, after the socket was up), leaving a folder named
in those bytes behind; meshctl started such a daemon and printed its traceback from
the log. Now each side refuses in one sentence, as it refuses a relative path
(docs/CONFORMANCE.md, "paths from the environment that are not UTF-8").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cli.conftest import run_meshctl
from tests.conftest import MeshEnv

from meshctl import Mesh

BAD = "x\udcff"  # the byte 0xff, as Python reads it from the environment


def _meshd(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meshd", "run", "--profile", "test"],
        env=env, capture_output=True, text=True, timeout=30, errors="surrogateescape",
    )  # fmt: skip


def _made(root: Path) -> list[bytes]:
    """Every entry under ``root`` whose name is not UTF-8 (what a refused start left)."""
    out = []
    for folder, dirs, files in os.walk(os.fsencode(root)):
        for name in dirs + files:
            try:
                name.decode("utf-8")
            except UnicodeDecodeError:
                out.append(os.path.join(folder, name))
    return out


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("MESH_SOCKET", "{root}/" + BAD + "/s.sock"),
        ("MESH_STATE_DIR", "{root}/" + BAD),
        ("MESH_CONFIG", "{root}/" + BAD + ".toml"),
    ],
)
def test_the_daemon_refuses_in_one_sentence(mesh_env: MeshEnv, var: str, value: str) -> None:
    """``meshd run`` exits 1 with one line naming the variable, no traceback, nothing made."""
    path = value.format(root=mesh_env.root)

    out = _meshd({**mesh_env.env, var: path})

    assert out.returncode == 1, out
    assert out.stderr.startswith(f"meshd: {var} is not valid UTF-8: "), out.stderr
    assert "x\\xff" in out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    assert _made(mesh_env.root) == []
    assert not mesh_env.socket.exists()


def test_a_state_folder_from_home_that_is_not_utf8(mesh_env: MeshEnv) -> None:
    """No override: the standard state folder under a non-UTF-8 HOME is refused too,
    with the variable that fixes it."""
    env = {**mesh_env.env, "HOME": str(mesh_env.root / BAD)}
    env.pop("MESH_STATE_DIR")
    env.pop("XDG_STATE_HOME", None)

    out = _meshd(env)

    assert out.returncode == 1, out
    assert out.stderr.startswith("meshd: the state folder path "), out.stderr
    assert "set MESH_STATE_DIR to a path whose name is UTF-8" in out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    assert _made(mesh_env.root) == []


@pytest.mark.parametrize("args", [["sessions", "active"], ["claim", "port:1"], ["doctor"]])
def test_meshctl_refuses_a_socket_that_is_not_utf8(mesh_env: MeshEnv, args: list[str]) -> None:
    """meshctl: a usage error (exit 2) naming the variable, as for a relative socket; no
    daemon is started (it used to be, and its traceback was printed)."""
    sock = f"{mesh_env.root}/{BAD}/s.sock"
    env = {**mesh_env.env, "MESH_SOCKET": sock, "MESH_SPAWN": "direct"}

    run = run_meshctl(*args, env=env)

    assert run.code == 2, run
    assert "MESH_SOCKET" in run.err
    assert "is not valid UTF-8" in run.err
    assert "Traceback" not in run.err
    assert _made(mesh_env.root) == []
    assert not mesh_env.state_dir.exists()


def test_meshctl_refuses_a_state_folder_that_is_not_utf8(mesh_env: MeshEnv) -> None:
    run = run_meshctl(
        "sessions",
        "active",
        env={**mesh_env.env, "MESH_STATE_DIR": f"{mesh_env.root}/{BAD}", "MESH_SPAWN": "direct"},
    )

    assert run.code == 2, run
    assert "MESH_STATE_DIR is not valid UTF-8" in run.err
    assert "Traceback" not in run.err
    assert _made(mesh_env.root) == []


def test_the_library_refuses_it_like_a_relative_path(
    mesh_env: MeshEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Mesh()`` raises ValueError naming the variable, before connecting or starting."""
    monkeypatch.setenv("MESH_SOCKET", f"{mesh_env.root}/{BAD}/s.sock")
    with pytest.raises(ValueError, match="MESH_SOCKET is not valid UTF-8"):
        Mesh()
    monkeypatch.setenv("MESH_SOCKET", str(mesh_env.socket))
    monkeypatch.setenv("MESH_STATE_DIR", f"{mesh_env.root}/{BAD}")
    with pytest.raises(ValueError, match="MESH_STATE_DIR is not valid UTF-8"):
        Mesh()
