"""What the async session layer needs from its concurrency library (anyio), in one place.

:mod:`meshctl._async.session` and :mod:`meshctl._async.shared` are the one source of
the session layer; ``scripts/unasync.py`` writes the blocking twin from them, which
imports :mod:`meshctl._sync._backend` instead of this module. The two backends have
the same names and shapes: locks, the heartbeat runner, a shield for leaving a block.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio

from meshd.protocol.errors import MeshError

if TYPE_CHECKING:
    from meshctl._async.client import AsyncMesh
    from meshctl._async.session import AsyncSession


def session_locks() -> tuple[anyio.Lock, anyio.Lock]:
    """A session's two locks: its state (heartbeats, ending), and registering again
    (taken inside the first, so a heartbeat that finds the session expired can
    register it again). anyio's locks are not reentrant, hence two."""
    return anyio.Lock(), anyio.Lock()


def shielded() -> anyio.CancelScope:
    """Where leaving a block still talks to the daemon (ending a session, releasing a
    claim): a cancelled task must finish that first."""
    return anyio.CancelScope(shield=True)


class Heartbeats:
    """A session's heartbeat task, in the task group of the session's ``AsyncMesh``;
    it heartbeats on the session's own connection (the reader task matches replies,
    so a slow call never delays a heartbeat)."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session
        #: Heartbeats answered so far.
        self.count = 0
        self._scope = anyio.CancelScope()
        self._started = False
        self._counted = anyio.Event()

    @property
    def started(self) -> bool:
        return self._started

    def start(self, run: Callable[[AsyncMesh], Awaitable[None]]) -> None:
        """Run ``run(mesh)`` in the mesh's task group until :meth:`stop`."""
        tg = self.session.mesh._tg
        if tg is None:
            raise MeshError("use the AsyncMesh inside `async with`")
        self._started = True

        async def task() -> None:
            with self._scope:
                await run(self.session.mesh)

        tg.start_soon(task)

    async def sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; True while the heartbeats go on (stopping cancels the task)."""
        await anyio.sleep(seconds)
        return True

    def beat(self) -> None:
        """One heartbeat answered."""
        self.count += 1
        self._counted.set()
        self._counted = anyio.Event()

    async def stop(self, timeout: float) -> None:
        """Stop the task (a heartbeat in flight is cancelled: the session is ending)."""
        self._scope.cancel()

    async def wait(self, count: int, timeout: float) -> bool:
        """Until :attr:`count` reaches ``count``; False on timeout."""
        with anyio.move_on_after(timeout):
            while self.count < count:
                await self._counted.wait()
        return self.count >= count
