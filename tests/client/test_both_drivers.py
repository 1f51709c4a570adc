"""One claim scenario table through both drivers of the session core (``Session``,
``AsyncSession``): the same grants, holders, releases and losses, in the same words."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from meshctl import AsyncMesh, Mesh

#: (name, what the other session does to the claim, whether it is lost, words in the loss)
SCENARIOS = [
    ("kept", None, False, ""),
    ("ttl", "ttl", True, "expired: its ttl ran out"),
    ("steal", "steal", True, "was stolen by other — hotfix"),
]


def steal(daemon: Any, key: str) -> None:
    reply = daemon.call(
        "claim.steal", {"session_id": "other", "resources": [key], "reason": "hotfix"}
    )
    assert "result" in reply, reply


@pytest.fixture
def other(daemon: Any) -> Any:
    assert "result" in daemon.call("session.register", {"session_id": "other"})
    return daemon


@pytest.mark.parametrize(("name", "action", "lost", "words"), SCENARIOS)
def test_blocking(other: Any, name: str, action: str | None, lost: bool, words: str) -> None:
    key = f"res:{name}"
    seen: list[str] = []
    with Mesh() as mesh, mesh.session(task="t", on_lost=seen.append) as s:
        c = s.claim(key, ttl=0.2 if action == "ttl" else None)
        held = s.check(key)
        if action == "steal":
            steal(other, key)
        deadline = time.monotonic() + 10
        while lost and not c.lost and time.monotonic() < deadline:
            time.sleep(0.02)
        result = (c.granted, c.lost, bool(held.get("claims")))
        released = c.release()

    assert result == (True, lost, False)  # its own claim is not "other" to itself
    assert released == ([] if lost else [key])
    assert (words in seen[0]) if lost else seen == []


@pytest.mark.anyio
@pytest.mark.parametrize(("name", "action", "lost", "words"), SCENARIOS)
async def test_async(other: Any, name: str, action: str | None, lost: bool, words: str) -> None:
    key = f"res:{name}"
    seen: list[str] = []
    async with AsyncMesh() as mesh, mesh.session(task="t", on_lost=seen.append) as s:
        c = await s.claim(key, ttl=0.2 if action == "ttl" else None)
        held = await s.check(key)
        if action == "steal":
            await anyio.to_thread.run_sync(steal, other, key)
        with anyio.move_on_after(10):
            while lost and not c.lost:
                await anyio.sleep(0.02)
        result = (c.granted, c.lost, bool(held.get("claims")))
        released = await c.release()

    assert result == (True, lost, False)
    assert released == ([] if lost else [key])
    assert (words in seen[0]) if lost else seen == []
