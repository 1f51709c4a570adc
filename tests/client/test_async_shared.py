"""The async twins of ``s.notes``, ``s.signal`` and ``s.once`` against the real daemon."""

from __future__ import annotations

from typing import Any

import anyio

from meshctl import AsyncMesh


class TestAsyncShared:
    async def test_notes_signals_and_once(self, daemon: Any) -> None:
        """A writes a shared and a private note, B reads; a wait is woken by an emit;
        only the first of two `once` blocks runs."""
        ran: list[str] = []
        got: list[Any] = []
        async with (
            AsyncMesh() as mesh,
            mesh.session(task="a") as a,
            mesh.session(task="b") as b,
        ):
            await a.notes.add("shared")
            await a.notes.add("private", private=True)
            by_b = [n.text for n in await b.notes.list(a.session_id)]

            async with anyio.create_task_group() as tg:

                async def waiter() -> None:
                    got.append(await b.signal("go").wait(timeout=60))

                tg.start_soon(waiter)
                await a.signal("go").emit([1, 2])

            for who, s in (("a", a), ("b", b)):
                async with s.once("daily") as first:
                    if first:
                        ran.append(who)

        assert by_b == ["shared"]
        assert got[0].payload == [1, 2]
        assert ran == ["a"]
