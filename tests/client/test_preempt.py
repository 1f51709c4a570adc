"""The library's side of preemption (SPEC §5b): on_preempt, pause, resume."""

from __future__ import annotations

import threading
from typing import Any

from meshctl import Mesh, _events


def test_on_preempt_pause_and_resume(daemon: Any) -> None:
    """The holder's callback hears who asks and why; pause releases into the reserved
    set; the preemptor takes and returns it; resume gives the note back."""
    with Mesh() as mesh, mesh.session(task="train") as low, mesh.session(task="ship") as boss:
        mesh.call("session.prioritize", {"session_id": boss.session_id, "rank": 4, "by": "ana"})
        heard: list[_events.PreemptEvent] = []
        got = threading.Event()

        def on_preempt(event: _events.PreemptEvent) -> None:
            heard.append(event)
            got.set()

        watcher = low.on_preempt(on_preempt)
        assert watcher is not None
        held = low.claim("res:gpu")
        asked = mesh.call(
            "claim.preempt",
            {"session_id": boss.session_id, "resources": ["res:gpu"], "reason": "release"},
        )
        assert got.wait(60)
        paused = low.pause("epoch 4 saved")
        taken = boss.claim("res:gpu")
        taken.release()
        resumed = low.resume(wait=5)
        watcher.stop()

    assert held.granted
    assert asked["status"] == "asked"
    assert (heard[0].by, heard[0].reason, heard[0].resources) == (
        boss.session_id, "release", ("res:gpu",),
    )  # fmt: skip
    assert heard[0].grace_s == 300
    assert paused is not None
    assert paused["reserved"] == ["res:gpu"]
    assert taken.granted
    assert resumed is not None
    assert (resumed["status"], resumed["note"]) == ("resumed", "epoch 4 saved")


def test_pause_and_resume_are_no_ops_when_disabled(daemon: Any, mesh_env: Any) -> None:
    mesh_env.write_config("[defaults]\nenabled = false\n")
    daemon.restart()
    with Mesh() as mesh, mesh.session(task="t") as s:
        assert s.pause("n") is None
        assert s.resume() is None
        assert s.on_preempt(lambda e: None) is None


def test_resume_waits_for_the_reply_as_long_as_the_daemon_may_wait(
    daemon: Any, mesh_env: Any
) -> None:
    """``resume()`` without ``wait`` waits the daemon's ``max_query_timeout`` (SPEC
    §5b/§2); the client waited a fixed 60 s (+ its timeout) for the reply, so against a
    daemon configured to wait longer it gave up with MeshTimeout while the daemon still
    waited (fails before). The reply is now awaited as long as mesh.info's
    ``config.max_query_timeout`` says."""
    mesh_env.write_config(mesh_env.config.read_text() + "max_query_timeout = 300\n")
    daemon.restart()
    timeouts: list[float | None] = []
    with Mesh(timeout=5.0) as mesh, mesh.session(task="t") as s:
        real = mesh.call

        def call(method: str, params: Any = None, *, timeout: float | None = None) -> Any:
            if method == "session.resume":
                timeouts.append(timeout)
            return real(method, params, timeout=timeout)

        mesh.call = call  # type: ignore[method-assign]
        cap = mesh.query_cap()
        resumed = s.resume()

    assert cap == 300
    assert resumed is not None
    assert timeouts == [305.0]


async def test_async_resume_waits_for_the_reply_as_long_as_the_daemon_may_wait(
    daemon: Any, mesh_env: Any
) -> None:
    """The async twin of the test above: ``AsyncSession.resume()`` without ``wait``
    awaited its reply a fixed 60 s (+ the timeout) whatever the daemon's
    ``max_query_timeout`` (fails before: 65.0); now as long as mesh.info says."""
    from meshctl import AsyncMesh

    mesh_env.write_config(mesh_env.config.read_text() + "max_query_timeout = 300\n")
    daemon.restart()
    timeouts: list[float | None] = []
    async with AsyncMesh(timeout=5.0) as mesh, mesh.session(task="t") as s:
        real = mesh.call

        async def call(method: str, params: Any = None, *, timeout: float | None = None) -> Any:
            if method == "session.resume":
                timeouts.append(timeout)
            return await real(method, params, timeout=timeout)

        mesh.call = call  # type: ignore[method-assign]
        cap = await mesh.query_cap()
        resumed = await s.resume()

    assert cap == 300
    assert resumed is not None
    assert timeouts == [305.0]


async def test_async_on_preempt_hears_the_preemptor(daemon: Any) -> None:
    """``AsyncSession.on_preempt`` (the same surface as the blocking one, now that both
    come from one source) calls a coroutine callback with the preempt event; pause then
    releases into the reserved set. AsyncSession had no on_preempt before."""
    import anyio

    from meshctl import AsyncMesh

    heard: list[_events.PreemptEvent] = []
    got = anyio.Event()

    async def on_preempt(event: _events.PreemptEvent) -> None:
        heard.append(event)
        got.set()

    async with AsyncMesh() as mesh, mesh.session(task="train") as low, mesh.session() as boss:
        await mesh.call(
            "session.prioritize", {"session_id": boss.session_id, "rank": 4, "by": "ana"}
        )
        watcher = await low.on_preempt(on_preempt)
        held = await low.claim("res:gpu")
        await mesh.call(
            "claim.preempt",
            {"session_id": boss.session_id, "resources": ["res:gpu"], "reason": "release"},
        )
        with anyio.fail_after(60):
            await got.wait()
        paused = await low.pause("epoch 4 saved")
        assert watcher is not None
        await watcher.stop()

    assert held.granted
    assert (heard[0].by, heard[0].reason, heard[0].resources) == (
        boss.session_id, "release", ("res:gpu",),
    )  # fmt: skip
    assert watcher.seen == 1
    assert paused is not None
    assert paused["reserved"] == ["res:gpu"]
