"""``AsyncMesh``: the anyio client, with the same surface as ``Mesh``.

Connection: one Unix socket per :class:`AsyncMesh`. One reader task (in the task
group the ``async with`` block opens) reads every line, hands each reply to the call
waiting on its ``id`` and puts ``event`` notifications on a bounded memory stream
(:meth:`AsyncMesh.events`); when that stream is full, new events are dropped and
counted (``dropped_events``), never waited on. The first exchange on each new
connection is ``mesh.info`` (protocol major version check, daemon identity).

Finding and starting the daemon is blocking work (``_spawn``), run in a worker thread.

Error handling mirrors the blocking client: MeshUnavailable when the daemon cannot be
reached (the next call reconnects, starting the daemon if allowed), MeshTimeout when
no reply comes in time, the class for the daemon's ``data.code`` otherwise. With
``fail_open=True`` an unreachable (or hung) daemon makes calls return None instead,
says so once through the ``meshctl`` logger, and reconnects with backoff (0.5 s
doubling to 30 s) on later calls -- the blocking ``Mesh``'s rule.

The session (``AsyncMesh.session``) is :class:`meshctl._async.session.AsyncSession`;
connections of their own for events and a live responder are in
:mod:`meshctl._async.connection`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from meshctl import _conn, _paths
from meshctl._async.connection import BROKEN, open_stream
from meshctl._async.session import AsyncSession
from meshctl._core import session as _session
from meshd.protocol.errors import (
    MeshError,
    MeshProtocolError,
    MeshTimeout,
    MeshUnavailable,
    StorageUnavailable,
)

log = logging.getLogger("meshctl")


class _Slot:
    """Where the reader task leaves one call's reply."""

    __slots__ = ("done", "reply", "stream")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.reply: _conn.Reply | None = None
        #: The connection the request went out on: only its closing fails this call.
        self.stream: anyio.abc.SocketStream | None = None


_HANGUP = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


def _hung_up(stream: anyio.abc.SocketStream) -> bool:
    """Whether the daemon closed this connection (say, after ``idle_timeout``), seen
    without reading: a request sent on it now could never be answered."""
    poller = select.poll()
    poller.register(stream.extra(anyio.abc.SocketAttribute.raw_socket).fileno(), _HANGUP)
    return bool(poller.poll(0))


class AsyncMesh:
    """An anyio connection to one profile's daemon; use ``async with``.

    Args:
        profile: the profile; else ``MESH_PROFILE``; else ``"default"``.
        socket: the socket path; else ``MESH_SOCKET``; else the standard location.
        autostart: start the daemon (detached) when none answers.
        fail_open: when the daemon cannot be reached, return None instead of raising.
        timeout: seconds to wait for each reply.
        max_events: events buffered for :meth:`events` before new ones are dropped.
    """

    def __init__(
        self,
        profile: str | None = None,
        socket: str | os.PathLike[str] | None = None,
        *,
        autostart: bool = True,
        fail_open: bool = False,
        timeout: float = 5.0,
        max_events: int = 256,
    ) -> None:
        self.profile, self.socket_path = _paths.client_target(profile, socket, autostart)
        self.autostart = autostart
        self.timeout = timeout
        self.daemon: tuple[Any, Any] = (None, None)
        self._info: Any = None  # the mesh.info the current connection began with
        self._fail_open = _session.FailOpen(fail_open)
        self.dropped_events = 0
        self._ids = _conn.Protocol()
        self._pending: dict[int, _Slot] = {}
        self._stream: anyio.abc.SocketStream | None = None
        self._connect_lock = anyio.Lock()
        self._send_lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False
        self._max_events = max_events
        self._ev_send: MemoryObjectSendStream[Any] | None = None
        self._ev_recv: MemoryObjectReceiveStream[Any] | None = None

    async def __aenter__(self) -> AsyncMesh:
        self._ev_send, self._ev_recv = anyio.create_memory_object_stream[Any](self._max_events)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            await self._ensure()
        except (MeshUnavailable, MeshTimeout) as exc:
            if not self.fail_open:
                await self._abandon(tg)
                raise
            self._fail_open.failed(exc)
        except BaseException:
            await self._abandon(tg)
            raise
        return self

    async def _abandon(self, tg: anyio.abc.TaskGroup) -> None:
        """``async with`` failed to open: close the group cleanly (no task of ours is
        left worth reporting), so the error goes through as itself, not wrapped in an
        exception group."""
        self._tg = None
        with anyio.CancelScope(shield=True):
            await self.aclose()
        tg.cancel_scope.cancel()
        await tg.__aexit__(None, None, None)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        tg, self._tg = self._tg, None
        if tg is None:
            return None
        tg.cancel_scope.cancel()
        return await tg.__aexit__(exc_type, exc, tb)

    async def aclose(self) -> None:
        """Close the connection and stop the reader; the AsyncMesh cannot be used again."""
        self._closed = True
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.aclose()
        if self._ev_send is not None:
            self._ev_send.close()
        if self._ev_recv is not None:
            self._ev_recv.close()

    # --- calls -------------------------------------------------------------------

    @property
    def fail_open(self) -> bool:
        """Whether an unreachable daemon makes calls return None instead of raising."""
        return self._fail_open.enabled

    async def call(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """Send one request and return its result (None when failing open: the rule is
        :class:`meshctl._core.session.FailOpen`'s)."""
        policy = self._fail_open
        if policy.skip():
            return None
        try:
            reply = await self._call(method, params, timeout)
        except (MeshUnavailable, MeshTimeout) as exc:
            policy.failed(exc)  # raises it unless failing open
            return None
        policy.answered(self.profile)
        return reply.unwrap()  # the daemon's own error is raised, never failed open

    async def _call(self, method: str, params: Any, timeout: float | None) -> _conn.Reply:
        rid, frame = self._ids.request(method, params)
        slot = _Slot()
        self._pending[rid] = slot
        try:
            await self._send(frame, slot)
            with anyio.fail_after(timeout or self.timeout):
                await slot.done.wait()
        except TimeoutError:
            raise MeshTimeout(
                f"no reply from meshd to {method} within {timeout or self.timeout} s"
            ) from None
        finally:
            self._pending.pop(rid, None)
        reply = slot.reply
        assert reply is not None
        if isinstance(reply.error, MeshUnavailable) and not isinstance(
            reply.error, StorageUnavailable
        ):
            raise reply.error  # the connection closed before the reply (see _read_loop)
        return reply

    async def ping(self) -> Any:
        """``mesh.ping``."""
        return await self.call("mesh.ping")

    async def info(self) -> Any:
        """``mesh.info`` (protocol major version checked)."""
        info = await self.call("mesh.info")
        if info is not None:
            _conn.check_protocol(info, str(self.socket_path or self.profile))
        return info

    async def query_cap(self) -> float:
        """As :meth:`meshctl.Mesh.query_cap`: the daemon's ``max_query_timeout``, from the
        ``mesh.info`` the current connection began with (one is opened if none is)."""
        if self._stream is None or self._info is None:
            await self._ensure()
        return _conn.query_cap(self._info)

    async def sessions(self, fresh: bool = False) -> list[dict[str, Any]]:
        """Live sessions of this profile."""
        result = await self.call("session.list", {"fresh": fresh})
        return [] if result is None else list(result.get("sessions", []))

    def session(
        self,
        task: str = "",
        source: str | None = None,
        session_id: str | None = None,
        liveness: str = "heartbeat",
        bind: bool = False,
        *,
        on_lost: Callable[[str], Any] | None = None,
        heartbeat_interval: float | None = None,
        **fields: Any,
    ) -> AsyncSession:
        """A session to use with ``async with``: registers, heartbeats in a task, ends."""
        core = _session.SessionCore.asked(
            task, source=source, session_id=session_id, liveness=liveness, bind=bind, fields=fields
        )
        return AsyncSession(self, core, on_lost=on_lost, heartbeat_interval=heartbeat_interval)

    def _pushed_loss(self, token: int | None, keys: list[str]) -> bool:
        """Whether a pushed event told of losing ``keys`` under ``token``: events here go
        to :meth:`events`' reader, not kept aside (heartbeats report losses)."""
        return False

    async def events(self) -> AsyncIterator[Any]:
        """Events pushed to this connection (after a subscription made with :meth:`call`)."""
        if self._ev_recv is None:
            raise MeshError("use AsyncMesh inside `async with`")
        async for event in self._ev_recv:
            yield event

    # --- connection --------------------------------------------------------------

    async def _ensure(self) -> anyio.abc.SocketStream:
        async with self._connect_lock:
            if self._closed:
                raise MeshError("this AsyncMesh is closed; create a new one")
            if self._stream is not None:
                if not _hung_up(self._stream):
                    return self._stream
                self._stream = None  # its reader closes it; this call gets a new one
            if self._tg is None:
                raise MeshError("use AsyncMesh inside `async with`")
            autostart = self._fail_open.may_start(self.autostart)
            stream = await open_stream(self.profile, self.socket_path, autostart, self.timeout)
            self._stream = stream
            self._tg.start_soon(self._read_loop, stream)
            rid, frame = self._ids.request("mesh.info")
            slot = _Slot()
            slot.stream = stream
            self._pending[rid] = slot
            try:
                # Refused or closed at once: the reader fails the slot saying why.
                with contextlib.suppress(*BROKEN):
                    await self._send_on(stream, frame)
                with anyio.fail_after(self.timeout):
                    await slot.done.wait()
                assert slot.reply is not None
                info = slot.reply.unwrap()
                _conn.check_daemon(info, str(self.socket_path or self.profile), self.profile)
            except BaseException:
                self._stream = None
                await stream.aclose()
                raise
            finally:
                self._pending.pop(rid, None)
            self.daemon = _conn.daemon_key(info)
            self._info = info
            self._fail_open.reached(self.profile)
            return stream

    async def _send(self, frame: bytes, slot: _Slot) -> None:
        for attempt in (1, 2):
            stream = await self._ensure()
            slot.stream = stream
            try:
                await self._send_on(stream, frame)
                return
            except BROKEN:
                if self._stream is stream:
                    self._stream = None
                if attempt == 2 or len(frame) > _conn.BIG_SEND:
                    break
        raise _conn.closed_while_sending(len(frame))

    async def _send_on(self, stream: anyio.abc.SocketStream, frame: bytes) -> None:
        async with self._send_lock:
            await stream.send(frame)

    async def _read_loop(self, stream: anyio.abc.SocketStream) -> None:
        reader = BufferedByteReceiveStream(stream)
        lost: MeshError | None = None
        try:
            while True:
                line = await reader.receive_until(b"\n", _conn.MAX_REPLY)
                if line.strip():
                    msg = _conn.parse_line(line)
                    if isinstance(msg, _conn.Reply) and msg.id is None and msg.error:
                        lost = _conn.lost_to(msg.error)  # a refusal, or whose it is unknown
                        break
                    self._route(msg)
        except (*BROKEN, anyio.DelimiterNotFound, MeshProtocolError) as exc:
            log.debug("meshd connection closed: %r", exc)
        finally:
            if self._stream is stream:
                self._stream = None
            with anyio.CancelScope(shield=True):
                await stream.aclose()
            gone = lost or MeshUnavailable(_conn.closed_before_reply(len(reader.buffer)))
            for slot in list(self._pending.values()):
                if slot.reply is None and slot.stream is stream:
                    slot.reply = _conn.Reply(None, error=gone)
                    slot.done.set()

    def _route(self, msg: _conn.Reply | _conn.Event) -> None:
        if isinstance(msg, _conn.Event):
            if self._ev_send is None:
                return
            try:
                self._ev_send.send_nowait(msg.params)
            except anyio.WouldBlock:
                if not self.dropped_events:
                    log.warning("meshctl: event reader falls behind; dropping events")
                self.dropped_events += 1
            except anyio.ClosedResourceError:
                pass
            return
        slot = self._pending.get(msg.id) if isinstance(msg.id, int) else None
        if slot is not None and slot.reply is None:
            slot.reply = msg
            slot.done.set()
