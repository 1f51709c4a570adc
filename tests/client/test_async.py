"""AsyncMesh and AsyncSession against the real daemon (anyio, asyncio backend in debug mode)."""

from __future__ import annotations

import os
from typing import Any

import anyio
import pytest

from meshctl import AsyncMesh, MeshUnavailable, MethodNotFound

from .conftest import HEARTBEAT


async def wait_until(predicate: Any, timeout: float = 60.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


class TestAsyncCalls:
    async def test_ping_info_sessions(self, daemon: Any) -> None:
        """Calls answer through the reader task; info passes the protocol check."""
        async with AsyncMesh() as mesh:
            pong = await mesh.ping()
            info = await mesh.info()
            sessions = await mesh.sessions()

        assert pong["pong"] is True
        assert info["pid"] == daemon.proc.pid
        assert mesh.daemon[0] == daemon.proc.pid
        assert sessions == []

    async def test_concurrent_calls_routed_by_id(self, daemon: Any) -> None:
        """Many calls in flight at once each get their own reply."""
        results: dict[str, Any] = {}
        async with AsyncMesh() as mesh:

            async def one(i: int) -> None:
                params = {"session_id": f"w:{i}", "task": f"task {i}", "pid": os.getpid()}
                results[f"w:{i}"] = await mesh.call("session.register", params)

            async with anyio.create_task_group() as tg:
                for i in range(40):
                    tg.start_soon(one, i)
            listed = {x["session_id"]: x["task"] for x in await mesh.sessions()}

        assert {k: v["session_id"] for k, v in results.items()} == {k: k for k in results}
        assert listed == {f"w:{i}": f"task {i}" for i in range(40)}

    async def test_error_reply_raises(self, daemon: Any) -> None:
        """The daemon's error becomes its class; the connection stays usable."""
        async with AsyncMesh() as mesh:
            with pytest.raises(MethodNotFound):
                await mesh.call("no.such.method")
            assert (await mesh.ping())["pong"] is True

    async def test_no_daemon_no_autostart(self, mesh_env: Any) -> None:
        """Nothing to reach and autostart off: MeshUnavailable on entry."""
        with pytest.raises(MeshUnavailable, match="meshctl daemon start"):
            async with AsyncMesh(autostart=False):
                pass

    async def test_reconnects_after_kill(self, daemon: Any) -> None:
        """After kill -9 and a restart, the next call reaches the new daemon."""
        async with AsyncMesh(autostart=False) as mesh:
            before = mesh.daemon
            await anyio.to_thread.run_sync(daemon.kill)
            await anyio.to_thread.run_sync(daemon.start)
            info = await mesh.info()

        assert info["pid"] == daemon.proc.pid
        assert mesh.daemon != before


class TestAsyncSession:
    async def test_lifecycle(self, daemon: Any) -> None:
        """Registers with pid and cwd, heartbeats from a task, ends on exit."""
        async with AsyncMesh() as mesh:
            async with mesh.session(task="async job", source="worker") as s:
                await wait_until(lambda: s.beats >= 2)
                await s.heartbeat(status="thinking")
                me = await mesh.call("session.get", {"session_id": s.session_id})
            after = await mesh.sessions()

        assert (me["pid"], me["cwd"], me["status"]) == (os.getpid(), os.getcwd(), "thinking")
        assert s._core.interval == HEARTBEAT
        assert s.lost == []
        assert after == []

    async def test_ended_behind_its_back(self, daemon: Any) -> None:
        """Ended by someone else: re-registered under the same id, the loss recorded."""
        async with AsyncMesh() as mesh, mesh.session(task="t") as s:
            await anyio.to_thread.run_sync(daemon.call, "session.end", {"session_id": s.session_id})
            await wait_until(lambda: s.lost)
            listed = {x["session_id"] for x in await mesh.sessions()}

        assert s.session_id in listed
        assert "re-registered" in s.lost[0]

    async def test_survives_kill_9(self, daemon: Any) -> None:
        """After kill -9 and a restart the session heartbeats again; the daemon restored it."""
        async with AsyncMesh(autostart=False) as mesh, mesh.session(task="t") as s:
            await anyio.to_thread.run_sync(daemon.kill)
            await anyio.to_thread.run_sync(daemon.start)
            await wait_until(lambda: s._core.daemon[0] == daemon.proc.pid)
            beats = s.beats
            await wait_until(lambda: s.beats >= beats + 2)

        assert s.lost == []

    async def test_events_arrive_on_the_subscribed_connection(self, daemon: Any) -> None:
        """After events.subscribe, a message to the session arrives as an event."""
        async with AsyncMesh() as mesh, mesh.session(task="t") as s:
            await mesh.call("events.subscribe", {"session_id": s.session_id})
            await mesh.call("session.register", {"session_id": "sender"})
            await mesh.call(
                "message.send", {"session_id": "sender", "to": s.session_id, "text": "hello"}
            )
            with anyio.fail_after(60):
                async for ev in mesh.events():
                    event = ev
                    break

        assert event["kind"] == "message"
        assert (event["from"], event["text"]) == ("sender", "hello")

    async def test_session_events_iterator(self, daemon: Any) -> None:
        """``async for event in s.events()`` yields what is sent to the session."""
        async with AsyncMesh() as mesh, mesh.session(task="t") as s:
            await mesh.call("session.register", {"session_id": "sender2"})
            first = anyio.Event()
            got: list[Any] = []

            async def read() -> None:
                async with s.events() as events:
                    async for ev in events:
                        got.append(ev)
                        first.set()
                        return

            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                # Sent again until the reader's subscription hears one, less and less
                # often: a subscription late on a loaded machine must not spend the
                # sender's message budget (30 a minute).
                pause = 0.2
                with anyio.fail_after(60):
                    while not got:
                        await mesh.call(
                            "message.send",
                            {"session_id": "sender2", "to": s.session_id, "text": "ping"},
                        )
                        with anyio.move_on_after(pause):
                            await first.wait()
                        pause = min(pause * 2, 5.0)

        assert got[0]["kind"] == "message"
        assert got[0]["text"] == "ping"
