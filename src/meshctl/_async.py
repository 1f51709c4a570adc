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
no reply comes in time, the class for the daemon's ``data.code`` otherwise.
"""

from __future__ import annotations

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

from meshctl import _claims, _conn, _paths, _session, _spawn
from meshctl._async_shared import AsyncSharedMixin
from meshd.protocol import contract
from meshd.protocol.errors import (
    FrameTooLarge,
    MeshError,
    MeshProtocolError,
    MeshTimeout,
    MeshUnavailable,
    MethodNotFound,
    SessionExpired,
    UnknownSession,
)

log = logging.getLogger("meshctl")

_BIG_SEND = 64 << 10
_BROKEN = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
    anyio.IncompleteRead,
    OSError,
)


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


async def _open(profile: str, path: Any, autostart: bool, timeout: float) -> anyio.abc.SocketStream:
    connect = _spawn.connect_or_start
    sock = await anyio.to_thread.run_sync(connect, profile, path, autostart, timeout)
    try:
        return await anyio.abc.UNIXSocketStream.from_socket(sock)
    except BaseException:
        sock.close()
        raise


class AsyncMesh:
    """An anyio connection to one profile's daemon; use ``async with``.

    Args:
        profile: the profile; else ``MESH_PROFILE``; else ``"default"``.
        socket: the socket path; else ``MESH_SOCKET``; else the standard location.
        autostart: start the daemon (detached) when none answers.
        timeout: seconds to wait for each reply.
        max_events: events buffered for :meth:`events` before new ones are dropped.
    """

    def __init__(
        self,
        profile: str | None = None,
        socket: str | os.PathLike[str] | None = None,
        *,
        autostart: bool = True,
        timeout: float = 5.0,
        max_events: int = 256,
    ) -> None:
        self.profile = contract.check_profile(
            profile or os.environ.get("MESH_PROFILE") or "default"
        )
        self.socket_path = _paths.socket_arg(socket)
        self.autostart = autostart
        self.timeout = timeout
        self.daemon: tuple[Any, Any] = (None, None)
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
        except BaseException:
            # Close the group cleanly (no task of ours is left worth reporting) and let
            # the original error through as itself, not wrapped in an exception group.
            self._tg = None
            with anyio.CancelScope(shield=True):
                await self.aclose()
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)
            raise
        return self

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

    async def call(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """Send one request and return its result."""
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
        assert slot.reply is not None
        return slot.reply.unwrap()

    async def ping(self) -> Any:
        """``mesh.ping``."""
        return await self.call("mesh.ping")

    async def info(self) -> Any:
        """``mesh.info`` (protocol major version checked)."""
        info = await self.call("mesh.info")
        _conn.check_protocol(info, str(self.socket_path or self.profile))
        return info

    async def sessions(self, fresh: bool = False) -> list[dict[str, Any]]:
        """Live sessions of this profile."""
        result = await self.call("session.list", {"fresh": fresh})
        return list(result.get("sessions", []))

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
        if source is not None:
            fields["source"] = source
        core = _session.SessionCore(
            task=task, session_id=session_id, liveness=liveness, bind=bind, fields=fields
        )
        return AsyncSession(self, core, on_lost=on_lost, heartbeat_interval=heartbeat_interval)

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
            stream = await _open(self.profile, self.socket_path, self.autostart, self.timeout)
            self._stream = stream
            self._tg.start_soon(self._read_loop, stream)
            rid, frame = self._ids.request("mesh.info")
            slot = _Slot()
            slot.stream = stream
            self._pending[rid] = slot
            try:
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
            return stream

    async def _send(self, frame: bytes, slot: _Slot) -> None:
        for attempt in (1, 2):
            stream = await self._ensure()
            slot.stream = stream
            try:
                await self._send_on(stream, frame)
                return
            except _BROKEN:
                if self._stream is stream:
                    self._stream = None
                if attempt == 2 or len(frame) > _BIG_SEND:
                    break
        if len(frame) > _BIG_SEND:
            raise FrameTooLarge(
                f"meshd closed the connection while a {len(frame)}-byte request was being "
                "sent; requests are limited to 1 MiB: send less per call"
            )
        raise MeshUnavailable(
            "meshd closed the connection twice in a row; check "
            "`meshctl daemon status` and its log in the state folder"
        )

    async def _send_on(self, stream: anyio.abc.SocketStream, frame: bytes) -> None:
        async with self._send_lock:
            await stream.send(frame)

    async def _read_loop(self, stream: anyio.abc.SocketStream) -> None:
        reader = BufferedByteReceiveStream(stream)
        try:
            while True:
                line = await reader.receive_until(b"\n", _conn.MAX_REPLY)
                if line.strip():
                    self._route(_conn.parse_line(line))
        except (*_BROKEN, anyio.DelimiterNotFound, MeshProtocolError) as exc:
            log.debug("meshd connection closed: %r", exc)
        finally:
            if self._stream is stream:
                self._stream = None
            with anyio.CancelScope(shield=True):
                await stream.aclose()
            gone = MeshUnavailable(_conn.closed_before_reply(len(reader.buffer)))
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
        key = msg.id if isinstance(msg.id, int) else min(self._pending, default=None)
        slot = self._pending.get(key) if key is not None else None
        if slot is not None and slot.reply is None:
            slot.reply = msg
            slot.done.set()


class AsyncSession(AsyncSharedMixin):
    """The async twin of :class:`meshctl.Session` (same loss reporting, same no-op rules)."""

    def __init__(
        self,
        mesh: AsyncMesh,
        core: _session.SessionCore,
        *,
        on_lost: Callable[[str], Any] | None = None,
        heartbeat_interval: float | None = None,
    ) -> None:
        self.mesh = mesh
        self._core = core
        self._on_lost = on_lost
        self._interval_override = heartbeat_interval
        self._lock = anyio.Lock()
        self._reregistering = anyio.Lock()
        self._scope = anyio.CancelScope()
        self._ended = False
        self.beats = 0

    @property
    def session_id(self) -> str | None:
        """The session's id."""
        return self._core.session_id

    @property
    def lost(self) -> list[str]:
        """One sentence per thing the daemon lost for this session."""
        return self._core.lost

    @property
    def disabled(self) -> bool:
        """The mesh is switched off in config: this session is a no-op."""
        return self._core.disabled

    async def __aenter__(self) -> AsyncSession:
        await self._register()
        if not self._core.disabled:
            if self.mesh._tg is None:
                raise MeshError("use the AsyncMesh inside `async with`")
            self.mesh._tg.start_soon(self._run)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self.end(
                    reason="ended" if exc_type is None else f"error: {exc_type.__name__}"
                )
            except MeshError as failure:  # leaving the block never fails on the mesh
                log.warning("Session Mesh: could not end session %s: %s", self.session_id, failure)

    async def heartbeat(
        self, status: str | None = None, task: str | None = None, **fields: Any
    ) -> Any:
        """Report what changed (None = unchanged) and say "still here"."""
        fields.update(status=status, task=task)
        async with self._lock:
            for key in ("status", "task", "cwd", "repo", "branch", "worktree", "tools"):
                if fields.get(key) is not None:
                    self._core.params[key] = fields[key]
            if self._ended or self._core.disabled:
                return None
            return await self._heartbeat(self._core.heartbeat_params(fields))

    async def end(self, handoff: str | None = None, *, reason: str = "ended") -> Any:
        """End the session (releasing its claims), optionally leaving a handoff."""
        async with self._lock:
            if self._ended:
                return None
            self._ended = True
        self._scope.cancel()
        if self._core.disabled:
            return None
        params: dict[str, Any] = {"session_id": self.session_id, "reason": reason}
        if handoff is not None:
            params["handoff"] = handoff
        try:
            return await self.mesh.call("session.end", params)
        except (SessionExpired, UnknownSession):
            return None

    def events(self) -> SessionEvents:
        """Events for this session, on a connection of their own (``events.subscribe``)."""
        return SessionEvents(self.mesh, str(self.session_id))

    # --- claims (SPEC §5), the rules of meshctl._session ---------------------------

    @property
    def active(self) -> bool:
        """Registered, not disabled, not ended."""
        return self._core.session_id is not None and not self._core.disabled and not self._ended

    async def claim(
        self,
        *resources: str,
        shared: bool = False,
        reason: str = "",
        ttl: float | None = None,
        wait: float = 0.0,
        broad: bool = False,
    ) -> AsyncClaim:
        """As ``Session.claim``: ``async with await s.claim("file:/x") as c: …`` releases
        on exit what this call acquired; ``c.lost`` turns true within one heartbeat."""
        if not resources:
            raise ValueError("claim() needs at least one resource")
        keys = _claims.resolve_all(resources)
        if not self.active:
            return AsyncClaim(self, {"status": "granted", "disabled": True}, keys, guarded=False)
        params = _claims.acquire_params(
            str(self.session_id), keys, shared=shared, reason=reason, ttl=ttl, wait=wait,
            broad=broad,
        )  # fmt: skip
        timeout = _claims.wait_timeout(wait, self.mesh.timeout)
        generation = self._core.generation
        try:
            result = await self.mesh.call(_claims.ACQUIRE, params, timeout=timeout)
        except (SessionExpired, UnknownSession) as exc:
            await self._recover(exc, generation)
            params["session_id"] = self.session_id
            result = await self.mesh.call(_claims.ACQUIRE, params, timeout=timeout)
        return AsyncClaim(self, result, keys, guarded=not result.get("disabled", False))

    async def release(self, *resources: str) -> list[str]:
        """Release ``resources`` (all of the session's claims when none are named)."""
        if not self.active:
            return []
        params: dict[str, Any] = {"session_id": self.session_id}
        if resources:
            params["resources"] = _claims.resolve_all(resources)
        try:
            result = await self.mesh.call(_claims.RELEASE, params)
        except (SessionExpired, UnknownSession):
            return []  # an ended session holds nothing
        released = [str(r) for r in result.get("released") or []]
        self._core.released(released)
        return released

    async def check(self, *resources: str) -> dict[str, Any]:
        """``claim.check``: overlapping claims of others, and sessions present there."""
        params: dict[str, Any] = {"resources": _claims.resolve_all(resources)}
        if self.active:
            params["session_id"] = self.session_id
        return dict(await self.mesh.call(_claims.CHECK, params))

    # --- internals ---------------------------------------------------------------

    async def _register(self) -> None:
        core = self._core
        result = await self.mesh.call("session.register", core.register_params())
        core.registered(result, self.mesh.daemon, self._interval_override)
        if core.disabled:
            log.warning(
                "Session Mesh is disabled in its config (enabled = false): session %s does nothing",
                core.session_id,
            )

    async def _heartbeat(self, params: dict[str, Any]) -> Any:
        generation = self._core.generation
        try:
            result = await self.mesh.call("session.heartbeat", params)
        except (SessionExpired, UnknownSession) as exc:
            await self._recover(exc, generation)
            result = await self.mesh.call("session.heartbeat", self._core.heartbeat_params({}))
        for message in self._core.heard(result):
            self._record(message)
        if self.mesh.daemon != self._core.daemon:
            old = self._core.daemon
            again = await self.mesh.call("session.register", self._core.register_params())
            self._core.registered(again, self.mesh.daemon, self._interval_override)
            lost = await self._validate_held()
            if (said := self._core.after_restart(old, again, lost)) is not None:
                self._record(said)
        return result

    async def _recover(self, exc: MeshError, generation: int) -> None:
        """Register again after an expiry -- once, however many callers saw it."""
        async with self._reregistering:
            if self._core.generation != generation:
                return
            old = self._core.daemon
            await self._register()
            self._record(self._core.after_expiry(exc, old, await self._validate_held()))

    async def _validate_held(self) -> list[tuple[str, int]]:
        """``claim.validate`` every (key, token) the session holds; the failed ones."""
        lost = []
        for key, token in self._core.to_validate():
            result = await self.mesh.call(_claims.VALIDATE, {"resource": key, "token": token})
            if not result.get("valid", False):
                lost.append((key, token))
        self._core.invalid(lost)
        return lost

    def _record(self, message: str) -> None:
        self._core.lost.append(message)
        log.warning("Session Mesh: %s", message)
        if self._on_lost is not None:
            try:
                self._on_lost(message)
            except Exception:
                log.exception("on_lost callback failed")

    async def _run(self) -> None:
        wait = self._core.interval
        with self._scope:
            while True:
                await anyio.sleep(wait)
                try:
                    async with self._lock:
                        if self._ended:
                            return
                        await self._heartbeat(self._core.heartbeat_params({}))
                except MeshUnavailable as exc:
                    log.debug("heartbeat: %s", exc)
                    wait = min(max(wait * 2, 0.5), 30.0)
                    continue
                except MeshError as exc:
                    log.warning("Session Mesh heartbeat failed: %s", exc)
                self.beats += 1
                wait = self._core.interval


class SessionEvents:
    """``async for event in session.events()``: a subscribed connection of its own.

    Reads lines itself (no task), so it can be iterated from any task; close it with
    ``aclose()`` or use it as ``async with session.events() as events``.
    """

    def __init__(self, mesh: AsyncMesh, session_id: str) -> None:
        self._mesh = mesh
        self._session_id = session_id
        self._stream: anyio.abc.SocketStream | None = None
        self._reader: BufferedByteReceiveStream | None = None

    def __aiter__(self) -> SessionEvents:
        return self

    async def __anext__(self) -> Any:
        reader = self._reader or await self._subscribe()
        while True:
            msg = await self._next(reader)
            if isinstance(msg, _conn.Event):
                return msg.params

    async def __aenter__(self) -> SessionEvents:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the subscription's connection."""
        stream, self._stream, self._reader = self._stream, None, None
        if stream is not None:
            await stream.aclose()

    async def _subscribe(self) -> BufferedByteReceiveStream:
        mesh = self._mesh
        stream = await _open(mesh.profile, mesh.socket_path, mesh.autostart, mesh.timeout)
        reader = BufferedByteReceiveStream(stream)
        self._stream = stream
        proto = _conn.Protocol()
        rid, frame = proto.request("events.subscribe", {"session_id": self._session_id})
        try:
            await stream.send(frame)
            with anyio.fail_after(mesh.timeout):
                while not isinstance(msg := await self._next(reader), _conn.Reply) or (
                    msg.id != rid
                ):
                    pass
            msg.unwrap()
        except MethodNotFound as exc:
            await self.aclose()
            raise MeshError(
                "this meshd does not push events yet (events.subscribe is unknown to it): "
                "upgrade and restart the daemon, or poll the inbox instead",
                {"code": "EVENTS_UNSUPPORTED"},
            ) from exc
        except BaseException:
            await self.aclose()
            raise
        self._reader = reader
        return reader

    async def _next(self, reader: BufferedByteReceiveStream) -> _conn.Reply | _conn.Event:
        try:
            while not (line := await reader.receive_until(b"\n", _conn.MAX_REPLY)).strip():
                pass
        except (*_BROKEN, anyio.DelimiterNotFound) as exc:
            await self.aclose()
            raise MeshUnavailable(
                "the event connection to meshd closed (the daemon may have restarted); "
                "iterate session.events() again to resubscribe"
            ) from exc
        return _conn.parse_line(line)


class AsyncClaim(_session.ClaimRecord):
    """What one ``AsyncSession.claim`` call got (the fields of
    :class:`meshctl._session.ClaimRecord`); ``async with`` releases what it acquired."""

    def __init__(
        self, session: AsyncSession, result: dict[str, Any], requested: list[str], *, guarded: bool
    ) -> None:
        self.session = session
        super().__init__(session._core, result, requested, guarded=guarded)

    async def validate(self) -> bool:
        """Ask the daemon whether our token still holds every key of the set (fencing)."""
        if not self.granted or not self.guarded:
            return self.granted
        call = self.session.mesh.call
        return self._validated(
            [await call(_claims.VALIDATE, {"resource": k, "token": self.token}) for k in self.keys]
        )

    async def release(self) -> list[str]:
        """Release what this call acquired (never an ``already_held`` claim); once."""
        if self._released or not self.acquired:
            self._released = True
            return []
        self._released = True
        return await self.session.release(*self.acquired)

    async def __aenter__(self) -> AsyncClaim:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self.release()
            except MeshError as failure:  # never raise on the way out; say so
                log.warning("Session Mesh: %s", self._release_failed(failure))
