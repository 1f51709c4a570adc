"""Fourth conformance audit, SPEC §10 (client library) with §5b: the async twin has
the same surface, and what ``resume`` hands back is tracked like any grant
(docs/CONFORMANCE.md)."""

from __future__ import annotations

from typing import Any

from tests.support import wait_for

from meshctl import AsyncMesh, Mesh


async def test_async_session_pauses_and_resumes(daemon: Any) -> None:
    """SPEC §10: AsyncMesh is "the same surface with anyio"; §5b names
    ``Session.resume()``, so the async session pauses and resumes too."""
    async with AsyncMesh() as mesh, mesh.session(task="train") as s:
        claim = await s.claim("res:gpu")
        paused = await s.pause("epoch 4 saved")
        listed = await mesh.call("claim.list", {})
        resumed = await s.resume(wait=5)
        after = await mesh.call("claim.list", {})

    assert claim.granted
    assert paused is not None
    assert paused["reserved"] == ["res:gpu"]
    assert not [c for c in listed["claims"] if c["session_id"] == s.session_id]
    assert resumed is not None
    assert (resumed["status"], resumed["note"]) == ("resumed", "epoch 4 saved")
    assert [c["resource"] for c in after["claims"] if c["session_id"] == s.session_id] == [
        "res:gpu"
    ]


def test_a_resumed_claim_that_is_stolen_is_reported_lost(daemon: Any) -> None:
    """SPEC §10: the client "reports what was lost"; a set taken back by ``resume`` is
    held like any claim, so its theft shows in ``s.lost`` as a claim's would."""
    with Mesh() as mesh, mesh.session(task="train") as s, mesh.session(task="boss") as boss:
        s.claim("res:gpu")
        s.pause("saved")
        resumed = s.resume(wait=5)
        assert resumed is not None
        assert resumed["status"] == "resumed"
        mesh.call(
            "claim.steal",
            {"session_id": boss.session_id, "resources": ["res:gpu"], "reason": "stuck"},
        )

        def lost() -> list[str]:
            s.heartbeat()
            return list(s.lost)

        wait_for(lost, what="the resumed claim reported lost")
