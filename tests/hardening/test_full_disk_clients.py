"""Both client drivers on a full disk (a real tmpfs filled to ENOSPC, as in test_faults).

A daemon that cannot store answers ``UNAVAILABLE`` (``StorageUnavailable``): it was
reached, it answered, nothing was acknowledged. The blocking ``Mesh`` raised it even
when failing open; ``AsyncMesh(fail_open=True)`` took it for an unreachable daemon,
returned None (the change silently not made, told as "no mesh") and then skipped
its calls for the backoff. Now both raise it, and stay connected
(docs/CONFORMANCE.md, "a full disk is not an unreachable daemon").
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.conftest import DaemonHandle, MeshEnv
from tests.hardening.test_faults import BIG, fill, small_state  # noqa: F401 - a fixture

from meshctl import AsyncMesh, Mesh, StorageUnavailable

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="mounting a tmpfs as the state folder needs root"
)


def _big(sid: str) -> dict[str, Any]:
    """Registration params that grow the WAL fast (four 4 KiB path fields)."""
    return {"session_id": sid, "cwd": BIG, "repo": BIG, "worktree": BIG, "branch": BIG}


#: How many writes may still fit in pages the WAL already owns once the disk is full.
TRIES = 2000


def _blocking(prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with Mesh(fail_open=True) as mesh:
        for i in range(TRIES):
            try:
                if mesh.call("session.register", _big(f"{prefix}{i}")) is None:
                    out["failed_open"] = True
                    break
            except StorageUnavailable as exc:
                out["refused"] = exc
                break
        out["then"] = mesh.call("mesh.info")
    return out


async def _async(prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with AsyncMesh(fail_open=True) as mesh:
        for i in range(TRIES):
            try:
                if await mesh.call("session.register", _big(f"{prefix}{i}")) is None:
                    out["failed_open"] = True
                    break
            except StorageUnavailable as exc:
                out["refused"] = exc
                break
        out["then"] = await mesh.call("mesh.info")
    return out


@pytest.mark.parametrize("driver", ["blocking", "async"])
def test_a_full_disk_is_raised_not_failed_open(
    mesh_env: MeshEnv,
    small_state: Path,  # noqa: F811 - the fixture imported above
    driver: str,
) -> None:
    d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=small_state)
    d.start()
    try:
        filler = fill(small_state)
        try:
            out = _blocking("b") if driver == "blocking" else anyio.run(_async, "a")
        finally:
            filler.unlink()
    finally:
        d.stop()

    assert "failed_open" not in out, out
    exc = out["refused"]
    assert exc.data["code"] == "UNAVAILABLE"
    # Still connected, not degraded into a no-op: the next call is answered.
    assert out["then"] is not None
    assert out["then"]["profile"] == "test"
