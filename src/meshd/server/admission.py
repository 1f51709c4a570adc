"""Who gets in: the accept loop, and the per-uid check every new connection passes.

Every accepted connection is checked first (SPEC §3): the peer's uid
(``SO_PEERCRED`` / ``LOCAL_PEERCRED``) must be ours, that uid may hold at most
``max_connections`` at once, and the daemon as a whole at most what its open-file
limit leaves (:meth:`Admission.limit`); else one error line and close at once
(:class:`Admission`). The open-file bound keeps a reserve, so the refusal itself
can be accepted and written: without it, a daemon at ``ulimit -n 64`` with 200 idle
clients failed ``accept`` with EMFILE and new clients waited, unanswered, until some
closed.

The accept loop survives its clients: ``accept`` errors from descriptor or memory
exhaustion are logged and retried after 100 ms (trio's
``_highlevel_serve_listeners``). anyio reports them as ``BrokenResourceError`` with
the ``OSError`` as its cause, so the cause is what is looked at; any other accept
failure is logged and raised, so the daemon exits (and its supervisor restarts it)
rather than living on with no listener.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
from anyio.abc import ByteStream, SocketAttribute, SocketListener, TaskGroup, UNIXSocketStream

from meshd.protocol.errors import Forbidden, MeshError, MeshUnavailable
from meshd.service import Service

log = logging.getLogger("meshd.server")  # the server's log, one name for operators

ACCEPT_BURST = 256
"""Connections taken from the backlog in one go after each accept."""
ACCEPT_RETRY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
"""Resource exhaustion: wait 100 ms (connections close meanwhile), then accept again."""
ACCEPT_SKIP_ERRNOS = {errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.EINTR}
"""That one connection failed (trio ignores these too): accept the next at once."""
FD_RESERVE = 24
"""Descriptors kept back beyond those open when serving starts (the database, its WAL
and reader, the log, the lock, the listener) and the watched processes' pidfds: for
the fleet's connection, a reload's read of the config, SQLite's temporary files, and
the refusal of one connection too many."""


def open_fds() -> int:
    """How many descriptors this process has open now (``/proc/self/fd``, else
    ``/dev/fd``); 32 when neither can be listed."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder)) - 1  # the listing's own descriptor
        except OSError:
            continue
    return 32


def nofile() -> int:
    """The soft RLIMIT_NOFILE (``meshd.app.raise_fd_limit`` lifted it to the hard one)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


Handle = Callable[[ByteStream], Coroutine[Any, Any, None]]
"""What runs each accepted connection (the server's ``_handle``)."""


async def accept_loop(
    listener: SocketListener,
    handle: Handle,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Accept until cancelled or the listener is closed; each connection runs
    ``handle(stream)`` in a task of its own."""
    async with listener, anyio.create_task_group() as tg:
        task_status.started()
        while True:
            try:
                stream = await listener.accept()
            except anyio.ClosedResourceError:
                return  # we closed the listener: shutting down
            except (OSError, anyio.BrokenResourceError) as exc:
                # anyio wraps accept()'s OSError in BrokenResourceError (cause
                # kept), so the errno is looked for on both.
                err = exc if isinstance(exc, OSError) else exc.__cause__
                code = err.errno if isinstance(err, OSError) else None
                if code in ACCEPT_SKIP_ERRNOS:
                    continue  # that one client went away before we took it
                if code in ACCEPT_RETRY_ERRNOS:
                    assert isinstance(err, OSError)
                    log.warning("accept failed (%s); retrying in 100 ms", err.strerror)
                    await anyio.sleep(0.1)
                    continue
                log.error("accept failed for good: %r (cause %r)", exc, err)
                raise
            tg.start_soon(handle, stream)
            await _accept_backlog(listener, handle, tg)


async def _accept_backlog(listener: SocketListener, handle: Handle, tg: TaskGroup) -> None:
    """Take every connection already waiting, not one per loop turn.

    anyio accepts one connection per pass of the event loop, so under load a
    burst of 1,000 clients waited behind busy connections for seconds (bench
    finding 10). Errors here are left for the next ``accept()`` to report.
    """
    raw = listener.extra(SocketAttribute.raw_socket)
    for _ in range(ACCEPT_BURST):
        try:
            sock, _addr = raw.accept()
        except OSError:  # BlockingIOError: nothing waiting; the rest: accept() reports
            return
        sock.setblocking(False)
        tg.start_soon(handle, await UNIXSocketStream.from_socket(sock))


class Admission:
    """The per-uid check: only the owner's uid, and at most ``max_connections`` of it;
    and the daemon's total within its open-file limit."""

    __slots__ = ("_uid", "base_fds", "per_uid", "service", "total")

    def __init__(self, service: Service) -> None:
        self.service = service
        self._uid = os.geteuid()
        self.per_uid: dict[int, int] = {}
        """Open connections per peer uid (foreign ones too, until refused)."""
        self.total = 0
        self.base_fds: int | None = None
        """Descriptors open when serving started (:meth:`measure`)."""

    def measure(self) -> None:
        """Count the descriptors the daemon holds before any client: called once the
        store is open and the listener bound, before the first accept."""
        if self.base_fds is None:
            self.base_fds = open_fds() - self.total

    def limit(self) -> tuple[int, int, int]:
        """``(connections, open-file limit, reserve)``: how many connections the daemon
        takes at once, from ``max_connections`` and from RLIMIT_NOFILE less the
        reserve (descriptors open before any client, watched pidfds, :data:`FD_RESERVE`)."""
        files = nofile()
        reserve = (self.base_fds or 32) + FD_RESERVE + self.service.pids.watched
        by_files = max(files - reserve, 1)
        return min(self.service.state.settings.max_connections, by_files), files, reserve

    def enter(self, uid: int) -> MeshError | None:
        """Count a new connection of ``uid``; why it is refused (foreign uid, too
        many), or None. A refused one is counted too, until :meth:`leave`."""
        self.per_uid[uid] = self.per_uid.get(uid, 0) + 1
        self.total += 1
        if uid != self._uid:
            return Forbidden(f"uid {uid} may not use this mesh (owner uid {self._uid})")
        allowed, files, reserve = self.limit()
        if self.total > allowed and allowed < self.service.state.settings.max_connections:
            log.warning(
                "%d connections open, the most the open-file limit (%d) leaves; refusing more",
                allowed, files,
            )  # fmt: skip
            return MeshUnavailable(
                f"too many connections: this daemon takes {allowed} at once (its "
                f"open-file limit RLIMIT_NOFILE is {files}, less {reserve} kept for the "
                "database, the log, the fleet and watched processes): close some, or "
                "raise the limit (ulimit -n before starting meshd, LimitNOFILE= in its "
                "systemd unit)",
                {"reason": "open_files", "limit": allowed, "rlimit_nofile": files},
            )
        limit = self.service.state.settings.max_connections
        if self.per_uid[uid] > limit:
            log.warning("uid %d has %d connections open; refusing more", uid, limit)
            return MeshUnavailable(
                f"too many connections from uid {uid} (the limit is max_connections = "
                f"{limit}): close some, or raise max_connections in config.toml",
                {"reason": "connections", "limit": limit},
            )
        return None

    def leave(self, uid: int) -> None:
        """A connection of ``uid`` closed (admitted or not)."""
        self.total -= 1
        left = self.per_uid[uid] - 1
        if left:
            self.per_uid[uid] = left
        else:
            del self.per_uid[uid]
