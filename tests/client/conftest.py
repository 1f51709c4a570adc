"""Client-test fixtures: the lead's ``mesh_env``/``daemon``, tuned for client tests.

``mesh_env`` is extended (same name, so the root ``daemon`` fixture uses it too) to
write a config with a short ``heartbeat_interval`` before any daemon starts, and to
set ``MESH_SPAWN=direct`` so an auto-started daemon is a plain detached process here
even on a machine with a systemd user manager.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support import wait_for

HEARTBEAT = 0.1


@pytest.fixture
def mesh_env(mesh_env: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    mesh_env.write_config(f"[defaults]\nheartbeat_interval = {HEARTBEAT}\n")
    monkeypatch.setenv("MESH_SPAWN", "direct")
    mesh_env.env["MESH_SPAWN"] = "direct"
    return mesh_env


def pid_gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in {"Z", "X"}
    except (FileNotFoundError, ProcessLookupError):
        return True


@pytest.fixture
def reap() -> Iterator[list[int]]:
    """Pids of daemons a test started through auto-start; killed and awaited afterwards."""
    pids: list[int] = []
    yield pids
    from meshctl import _spawn

    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    for proc in list(_spawn._SPAWNED):
        if proc.pid in pids:
            proc.wait(timeout=10)
            _spawn._SPAWNED.remove(proc)
    for pid in pids:
        wait_for(functools.partial(pid_gone, pid))
