"""Process liveness: notice a session's process dying within 2 s (SPEC §4).

On Linux each watched pid gets a pidfd (``os.pidfd_open``) and a task that
waits for it to become readable, which the kernel signals the moment the
process exits: no polling, and watching 1,000 sessions costs 1,000 idle fds.
Where pidfds are missing, a once-a-second poll of ``/proc`` (or ``kill(pid, 0)``)
stands in.

A pid alone can be reused, so every check also compares the process start time
read at registration (``/proc/PID/stat`` field 22). A zombie counts as dead.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable

import anyio
from anyio.abc import TaskGroup

log = logging.getLogger("meshd.pidwatch")
POLL_INTERVAL = 1.0


def start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot; ``None`` if gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError:
        return _kill0(pid)
    fields = data[data.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def _kill0(pid: int) -> int | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return 0
    return 0


def alive(pid: int, start: int | None) -> bool:
    """Whether the very process registered as (pid, start) still runs."""
    now = start_time(pid) if os.path.exists("/proc/self/stat") else _kill0(pid)
    if now is None:
        return False
    return start is None or now in (start, 0)


class PidWatcher:
    """Watches the processes of sessions; reports each death as ``on_death(session_id, pid)``.

    A session may be anchored to several processes (``meshctl run`` anchors its
    session to itself and to COMMAND); each (session, pid) is watched on its own.
    """

    def __init__(self, on_death: Callable[[str, int], None]) -> None:
        self.on_death = on_death
        self._tg: TaskGroup | None = None
        self._scopes: dict[tuple[str, int], anyio.CancelScope] = {}
        self._polled: dict[tuple[str, int], int | None] = {}
        self._of: dict[str, set[int]] = {}
        self.pidfd = hasattr(os, "pidfd_open")

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._poll_loop)
            task_status.started()
            await anyio.sleep_forever()

    def watch(self, sid: str, pid: int, start: int | None) -> None:
        """Watch one more process of ``sid`` (watching the same pid again is a no-op)."""
        key = (sid, pid)
        if key in self._scopes or key in self._polled:
            return
        self._of.setdefault(sid, set()).add(pid)
        if self.pidfd and self._tg is not None:
            try:
                fd = os.pidfd_open(pid)
            except OSError as exc:
                if exc.errno == errno.ESRCH:
                    self._died(key)
                    return
                log.debug("pidfd_open(%d) failed (%s); polling instead", pid, exc)
            else:
                if not alive(pid, start):  # opened a reused pid: not ours
                    os.close(fd)
                    self._died(key)
                    return
                scope = anyio.CancelScope()
                self._scopes[key] = scope
                self._tg.start_soon(self._wait_fd, key, fd, scope)
                return
        self._polled[key] = start

    def unwatch(self, sid: str, pid: int | None = None) -> None:
        """Stop watching one process of ``sid``, or all of them."""
        pids = self._of.get(sid, set())
        for p in [pid] if pid is not None else list(pids):
            key = (sid, p)
            scope = self._scopes.pop(key, None)
            if scope is not None:
                scope.cancel()
            self._polled.pop(key, None)
            pids.discard(p)
        if not pids:
            self._of.pop(sid, None)

    @property
    def watched(self) -> int:
        return len(self._scopes) + len(self._polled)

    def _died(self, key: tuple[str, int]) -> None:
        self._scopes.pop(key, None)
        self._polled.pop(key, None)
        pids = self._of.get(key[0])
        if pids is not None:
            pids.discard(key[1])
            if not pids:
                del self._of[key[0]]
        self.on_death(*key)

    async def _wait_fd(self, key: tuple[str, int], fd: int, scope: anyio.CancelScope) -> None:
        try:
            with scope:
                await anyio.wait_readable(fd)
                if self._scopes.get(key) is scope:
                    self._died(key)
        finally:
            os.close(fd)

    async def _poll_loop(self) -> None:
        while True:
            await anyio.sleep(POLL_INTERVAL)
            for key, start in list(self._polled.items()):
                if not alive(key[1], start) and key in self._polled:
                    self._died(key)
