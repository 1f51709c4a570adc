"""Connections of their own for the anyio client (pushed events, a live responder, preemption).

:class:`AsyncConnection` is read by whoever awaits it (no reader task of its own), so
``async for event in session.events()`` can be iterated from any task
(:mod:`meshctl._async.events`), and a live responder
(:mod:`meshctl._async.responder`) or a preemption watcher
(:mod:`meshctl._async.preempt`) serves from a task of the ``AsyncMesh``'s task group.
"""

from __future__ import annotations

import socket
from collections import deque
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from meshctl import _conn, _spawn
from meshd.protocol.errors import MeshTimeout, MeshUnavailable

if TYPE_CHECKING:
    from meshctl._core.abc import Target

BROKEN = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
    anyio.IncompleteRead,
    OSError,
)


async def open_stream(
    profile: str, path: Any, autostart: bool, timeout: float
) -> anyio.abc.SocketStream:
    """A connected stream to the daemon (finding or starting it runs in a worker thread)."""
    connect = _spawn.connect_or_start
    raw = await anyio.to_thread.run_sync(connect, profile, path, autostart, timeout)
    sock = socket.socket(fileno=raw.detach())  # anyio takes socket.socket, not _socket's
    try:
        return await anyio.abc.UNIXSocketStream.from_socket(sock)
    except BaseException:
        sock.close()
        raise


class AsyncConnection:
    """A connection of its own to the daemon of ``mesh``: requests and their replies,
    pushed events kept aside for :meth:`next_event`. Any failure closes it."""

    def __init__(self, mesh: Target) -> None:
        self._mesh = mesh
        self._proto = _conn.Protocol()
        self._stream: anyio.abc.SocketStream | None = None
        self._reader: BufferedByteReceiveStream | None = None
        self.events: deque[dict[str, Any]] = deque()

    async def open(self) -> AsyncConnection:
        """Connect and check ``mesh.info`` (protocol version, profile)."""
        mesh = self._mesh
        stream = await open_stream(mesh.profile, mesh.socket_path, mesh.autostart, mesh.timeout)
        self._stream, self._reader = stream, BufferedByteReceiveStream(stream)
        try:
            info = await self.call("mesh.info")
            _conn.check_daemon(info, str(mesh.socket_path or mesh.profile), mesh.profile)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.aclose()
            raise
        return self

    async def call(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """One request and its result (the daemon's error raised)."""
        stream = self._stream
        if stream is None:
            raise MeshUnavailable("this connection to meshd is closed")
        rid, frame = self._proto.request(method, params)
        wait = timeout or self._mesh.timeout
        try:
            await stream.send(frame)
            with anyio.fail_after(wait):
                while True:
                    msg = await self._next()
                    if isinstance(msg, _conn.Event):
                        self._keep(msg)
                    elif msg.id == rid or msg.id is None:
                        return msg.unwrap()
        except TimeoutError:
            await self.aclose()
            raise MeshTimeout(f"no reply from meshd to {method} within {wait} s") from None
        except BROKEN as exc:
            await self.aclose()
            raise MeshUnavailable(f"lost the connection to meshd: {exc!r}; retry") from exc

    async def next_event(self, timeout: float | None) -> dict[str, Any] | None:
        """The next pushed event; None when none came within ``timeout`` seconds."""
        with anyio.move_on_after(timeout):
            while not self.events:
                msg = await self._next()
                if isinstance(msg, _conn.Event):
                    self._keep(msg)
        return self.events.popleft() if self.events else None

    def _keep(self, event: _conn.Event) -> None:
        if isinstance(event.params, dict):
            self.events.append(event.params)

    async def _next(self) -> _conn.Reply | _conn.Event:
        reader = self._reader
        if reader is None:
            raise MeshUnavailable("this connection to meshd is closed")
        try:
            while not (line := await reader.receive_until(b"\n", _conn.MAX_REPLY)).strip():
                pass
        except (*BROKEN, anyio.DelimiterNotFound) as exc:
            await self.aclose()
            raise MeshUnavailable(
                "meshd closed the connection (it may have stopped or restarted)"
            ) from exc
        return _conn.parse_line(line)

    async def aclose(self) -> None:
        """Close the connection (the daemon forgets its subscriptions). Idempotent."""
        stream, self._stream, self._reader = self._stream, None, None
        self._proto.clear()
        if stream is not None:
            await stream.aclose()
