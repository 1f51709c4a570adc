"""What the async session layer needs from its concurrency library (anyio), in one place.

:mod:`meshctl._async.session` and :mod:`meshctl._async.shared` are the one source of
the session layer (with ``responder``, ``preempt`` and ``events``);
``scripts/unasync.py`` writes the blocking twin from them, which
imports :mod:`meshctl._sync._backend` instead of this module. The two backends have
the same names and shapes: locks, the heartbeat runner, a loop apart from the caller
(a responder, a preemption watcher), a connection of its own, a shield for leaving a
block, and how a callback's result is taken (awaited here, when it is awaitable).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from meshctl._async.connection import AsyncConnection
from meshctl._core.messaging import Query
from meshd.protocol.errors import MeshError

if TYPE_CHECKING:
    from meshctl._async.abc import AsyncClient, AsyncSessionLike

T = TypeVar("T")


def session_locks() -> tuple[anyio.Lock, anyio.Lock]:
    """A session's two locks: its state (heartbeats, ending), and registering again
    (taken inside the first, so a heartbeat that finds the session expired can
    register it again). anyio's locks are not reentrant, hence two."""
    return anyio.Lock(), anyio.Lock()


def shielded() -> anyio.CancelScope:
    """Where leaving a block still talks to the daemon (ending a session, releasing a
    claim): a cancelled task must finish that first."""
    return anyio.CancelScope(shield=True)


def _task_group(mesh: AsyncClient) -> anyio.abc.TaskGroup:
    """The task group of the ``AsyncMesh`` that made the session: it runs what goes on
    apart from the caller. (Read by name: the session layer sees its client through
    :class:`~meshctl._async.abc.AsyncClient`, and only this backend knows task groups.)"""
    tg: anyio.abc.TaskGroup | None = getattr(mesh, "_tg", None)
    if tg is None:
        raise MeshError("use the AsyncMesh inside `async with`")
    return tg


class Heartbeats:
    """A session's heartbeat task, in the task group of the session's ``AsyncMesh``;
    it heartbeats on the session's own connection (the reader task matches replies,
    so a slow call never delays a heartbeat)."""

    def __init__(self, session: AsyncSessionLike) -> None:
        self.session = session
        #: Heartbeats answered so far.
        self.count = 0
        self._scope = anyio.CancelScope()
        self._started = False
        self._counted = anyio.Event()

    @property
    def started(self) -> bool:
        return self._started

    def start(self, run: Callable[[AsyncClient], Awaitable[None]]) -> None:
        """Run ``run(mesh)`` in the mesh's task group until :meth:`stop`."""
        tg = _task_group(self.session.mesh)
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


#: What ``on_query`` takes: the answer (or an awaitable of it), or None/"" to leave the
#: query to the status responder.
QueryHandler = Callable[[Query], str | Awaitable[str | None] | None]
#: What ``on_query(on_event=...)`` takes: every other event of the session.
EventHandler = Callable[[dict[str, Any]], Any]


async def connect(mesh: AsyncClient) -> AsyncConnection:
    """A connection of its own to ``mesh``'s daemon (events, a responder, preemption)."""
    return await AsyncConnection(mesh).open()


async def settle(value: T | Awaitable[T]) -> T:
    """What a callback returned: awaited when it is awaitable (a coroutine function's)."""
    if inspect.isawaitable(value):
        return await value
    return value


async def next_event(conn: AsyncConnection) -> dict[str, Any]:
    """The next event pushed to ``conn``, however long it takes."""
    event = await conn.next_event(None)
    assert event is not None  # no timeout: it waits for one
    return event


class _Busy:
    """A section :meth:`Worker.stop` lets finish (an answer on its way)."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    def __enter__(self) -> None:
        self._worker._busy = anyio.Event()

    def __exit__(self, *exc: object) -> None:
        busy, self._worker._busy = self._worker._busy, None
        if busy is not None:
            busy.set()


class Worker:
    """A loop apart from the caller: a task in the AsyncMesh's task group, until
    :meth:`stop` (which lets a :meth:`busy` section finish first)."""

    def __init__(self, mesh: AsyncClient, name: str) -> None:
        self._mesh = mesh
        self.name = name
        self._scope = anyio.CancelScope()
        self._stopped = False
        self._started = False
        self._done = anyio.Event()
        self._busy: anyio.Event | None = None

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopped

    @property
    def running(self) -> bool:
        return self._started and not self._done.is_set()

    def start(self, run: Callable[[], Awaitable[None]]) -> None:
        tg = _task_group(self._mesh)
        self._started = True

        async def task() -> None:
            try:
                with self._scope:
                    await run()
            finally:
                self._done.set()

        tg.start_soon(task)

    async def sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; True unless stopped meanwhile (stopping cancels the wait)."""
        await anyio.sleep(seconds)
        return not self._stopped

    def busy(self) -> _Busy:
        return _Busy(self)

    async def stop(self, timeout: float) -> None:
        """Stop the loop: a busy section is let finish (up to ``timeout`` s), then the
        task is cancelled."""
        self._stopped = True
        busy = self._busy
        if busy is not None:
            with anyio.move_on_after(timeout):
                await busy.wait()
        self._scope.cancel()
