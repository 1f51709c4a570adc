"""Path keys are made canonical off the event loop, with a deadline.

:func:`meshd.keys.canonical_key` reads the filesystem (``realpath``: an ``lstat`` per
component). On a hung network mount that call never returns; on the event loop it
would freeze the whole daemon -- every client, the sweeper, the socket guard. So
any work that resolves paths runs here, in a worker thread of its own, and the
caller waits at most :data:`RESOLVE_TIMEOUT`; past that it is answered UNAVAILABLE
("a hung mount?") and the daemon goes on serving.

A thread stuck in the kernel cannot be cancelled. The worker it was is abandoned
(it exits once its call returns, if ever) and a fresh one takes the jobs queued
behind it; after :data:`MAX_STUCK` abandoned workers that never came back, path
work is refused at once instead of leaking threads. Keys that resolve nothing
(``res:X``, ``port:N``) never come here: they stay on the loop.

The hand-off is one queue put and one ``call_soon_threadsafe`` (as in
:mod:`meshd.store`), about one thread switch each way.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from meshd.protocol.errors import MeshUnavailable

log = logging.getLogger("meshd.resolver")
T = TypeVar("T")

RESOLVE_TIMEOUT = 5.0
"""Seconds a request may wait for its paths to resolve before it is refused."""
PER_PATH = 0.02
"""More seconds a batch may take for each path past its first."""
MAX_STUCK = 8
"""Abandoned (stuck) workers allowed at once; beyond that path work is refused."""


class _Job:
    __slots__ = ("fn", "future", "loop")

    def __init__(self, fn: Callable[[], Any], loop: asyncio.AbstractEventLoop) -> None:
        self.fn = fn
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()


def _settle(fut: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if fut.done():
        return  # the caller gave up (timed out or was cancelled)
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)


class Resolver:
    """One worker thread for filesystem look-ups, replaced when it gets stuck."""

    def __init__(self, timeout: float = RESOLVE_TIMEOUT) -> None:
        self.timeout = timeout
        self._queue: queue.SimpleQueue[_Job | None] | None = None
        self._stuck: set[threading.Thread] = set()
        self._worker: threading.Thread | None = None

    async def run(self, fn: Callable[[], T], what: str = "a path", paths: int = 1) -> T:
        """``fn()`` in the worker; UNAVAILABLE if it takes over :attr:`timeout` (and
        :data:`PER_PATH` more for each of ``paths`` past the first: a batch of 1,000
        deep paths is slow, not hung)."""
        timeout = self.timeout + PER_PATH * max(paths - 1, 0)
        self._stuck = {t for t in self._stuck if t.is_alive()}
        if len(self._stuck) >= MAX_STUCK:
            raise MeshUnavailable(
                f"cannot resolve {what}: {len(self._stuck)} earlier look-ups are stuck in "
                "the filesystem (a hung mount?); nothing was done",
                {"what": what},
            )
        job = _Job(fn, asyncio.get_running_loop())
        self._submit(job)
        with anyio.move_on_after(timeout):
            return await job.future  # type: ignore[no-any-return]
        job.future.cancel()
        self._abandon()
        raise MeshUnavailable(
            f"resolving {what} took over {timeout:g} s (a hung mount?); nothing was done",
            {"what": what, "timeout_s": timeout},
        )

    def _submit(self, job: _Job) -> None:
        if self._queue is None or self._worker is None:
            q: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
            self._queue = q
            self._worker = threading.Thread(
                target=_work, args=(q,), name="meshd-resolver", daemon=True
            )
            self._worker.start()
        self._queue.put(job)

    def _abandon(self) -> None:
        """The worker is stuck: hand what waits behind it to a fresh one."""
        old_q, old = self._queue, self._worker
        if old_q is None or old is None:
            return
        self._queue, self._worker = None, None
        if old.is_alive():
            self._stuck.add(old)
            log.error(
                "a filesystem look-up is stuck (a hung mount?); %d worker(s) abandoned",
                len(self._stuck),
            )
        waiting = []
        while True:
            try:
                job = old_q.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                waiting.append(job)
        old_q.put(None)  # the old worker exits if its call ever returns
        for job in waiting:
            self._submit(job)

    def stop(self) -> None:
        if self._queue is not None:
            self._queue.put(None)
            self._queue = self._worker = None


def _work(q: queue.SimpleQueue[_Job | None]) -> None:
    while (job := q.get()) is not None:
        if job.future.done():
            continue
        value: Any = None
        error: BaseException | None = None
        try:
            value = job.fn()
        except BaseException as exc:  # handed to the caller, raised there
            error = exc
        try:
            job.loop.call_soon_threadsafe(_settle, job.future, value, error)
        except RuntimeError:  # the loop closed meanwhile
            return
