"""``AsyncSession``: a registered session of the anyio client (SPEC §10).

The same surface and rules as the blocking :class:`meshctl.Session` -- claims,
messages, queries, a live responder, broadcasts, handoffs, shared work, loss
reporting, the no-op when disabled or unreachable with ``fail_open`` -- because both
drive the same I/O-free core (:mod:`meshctl._session`, :mod:`meshctl._messaging`);
this module only awaits the calls. Heartbeats run in a task of the ``AsyncMesh``'s
task group; events and a live responder use connections of their own
(:mod:`meshctl._async_listen`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from meshctl import _claims, _session
from meshctl import _messaging as _m
from meshctl._async_listen import AsyncResponder, SessionEvents
from meshctl._async_shared import AsyncNotebook, AsyncOnce, AsyncSignal
from meshctl._messaging import Answer, Broadcast, Handoff, Item, Query, RequestedHandoff, Sent
from meshctl._session import BACKOFF_FIRST, BACKOFF_MAX
from meshd.protocol.errors import MeshError, MeshUnavailable, SessionExpired, UnknownSession

if TYPE_CHECKING:
    from meshctl._async import AsyncMesh

log = logging.getLogger("meshctl")
T = TypeVar("T")


class AsyncSession:
    """The async twin of :class:`meshctl.Session`: the same surface (claims, messages,
    queries, a live responder, broadcasts, handoffs, shared work), the same loss
    reporting and the same no-op rules (disabled, or unreachable with ``fail_open``),
    because both drive the same I/O-free core."""

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
        self._registered = False
        self._ended = False
        #: Heartbeats the background task got answered.
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
            self._core.remember(fields)
            if not self.active:
                return None
            return await self._heartbeat(self._core.heartbeat_params(fields))

    async def end(self, handoff: str | None = None, *, reason: str = "ended") -> Any:
        """End the session (releasing its claims), optionally leaving a handoff."""
        async with self._lock:
            if self._ended:
                return None
            self._ended = True
        self._scope.cancel()
        if not self._registered or self._core.disabled:
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

    # --- messages, queries, broadcasts, handoffs (SPEC §6): as Session's -------------

    async def send(self, to: str | None, text: str, reply_to: int | None = None) -> Sent | None:
        """As :meth:`meshctl.Session.send`."""
        return await self._do(_m.send(to, text, reply_to))

    async def inbox(self, all: bool = False, peek: bool = True) -> list[Item]:
        """As :meth:`meshctl.Session.inbox`."""
        return await self._do(_m.inbox(all, peek))

    async def ack(self, ids: Iterable[int]) -> list[int]:
        """As :meth:`meshctl.Session.ack`."""
        return await self._do(_m.ack(ids))

    async def message_states(self, ids: Iterable[int]) -> dict[int, str]:
        """As :meth:`meshctl.Session.message_states`."""
        return await self._do(_m.message_states(ids))

    async def ask(self, to: str, question: str, timeout: float = 10) -> Answer | None:
        """As :meth:`meshctl.Session.ask`."""
        return await self._do(_m.ask(to, question, timeout))

    async def answer(self, query_id: int, text: str) -> dict[str, Any] | None:
        """As :meth:`meshctl.Session.answer`."""
        return await self._do(_m.answer(query_id, text))

    async def broadcast(
        self, text: str, collect: bool = False, timeout: float = 10, path: str | None = None
    ) -> Broadcast | None:
        """As :meth:`meshctl.Session.broadcast`."""
        return await self._do(_m.broadcast(text, collect, timeout, path))

    async def handoff(
        self,
        summary: str,
        to: str | None = None,
        files: Iterable[str] = (),
        branch: str | None = None,
        next_steps: Iterable[str] = (),
    ) -> Handoff | None:
        """As :meth:`meshctl.Session.handoff`."""
        return await self._do(_m.handoff(summary, to, files, branch, next_steps))

    async def handoffs(self, all: bool = False) -> list[Handoff]:
        """As :meth:`meshctl.Session.handoffs`."""
        return await self._do(_m.handoffs(all))

    async def request_handoff(self, to: str, timeout: float = 10) -> RequestedHandoff | None:
        """As :meth:`meshctl.Session.request_handoff`."""
        return await self._do(_m.request_handoff(to, timeout))

    async def on_query(
        self,
        handler: Callable[[Query], str | Awaitable[str | None] | None],
        *,
        on_event: Callable[[dict[str, Any]], Any] | None = None,
    ) -> AsyncResponder:
        """As :meth:`meshctl.Session.on_query`, served by a task of the AsyncMesh; the
        handler may be a coroutine function (a plain one runs on the event loop)."""
        responder = AsyncResponder(self, handler, on_event)
        if self.active:
            await responder.start()
        else:
            log.warning(
                "Session Mesh: session %s is not active (disabled, not started or "
                "unreachable); on_query does nothing",
                self.session_id,
            )
        return responder

    # --- preemption (SPEC §5b); preempt events come through :meth:`events` -------------

    async def pause(self, note: str) -> dict[str, Any] | None:
        """As :meth:`meshctl.Session.pause`: leave ``note``, set status ``paused`` and
        release every claim into a reserved set; None when a no-op."""
        result = await self._mcall("session.pause", {"note": note})
        if result is not None:
            self._core.held.clear()  # released into the reservation, not lost
        return None if result is None else dict(result)

    async def resume(self, wait: float | None = None) -> dict[str, Any] | None:
        """As :meth:`meshctl.Session.resume`: queue for the reserved set (up to ``wait``
        s; default the daemon's max_query_timeout) and get the checkpoint ``note``."""
        params: dict[str, Any] = {} if wait is None else {"wait": wait}
        # No wait given: the daemon waits its max_query_timeout, so the reply may take that long.
        cap = await self.mesh.query_cap() if wait is None and self.active else wait
        result = await self._mcall("session.resume", params, cap or 0.0)
        if result is None:
            return None
        self._core.granted(result.get("token"), result.get("resources") or [])
        return dict(result)

    # --- shared work (SPEC §7) ----------------------------------------------------

    @property
    def notes(self) -> AsyncNotebook:
        """As :attr:`meshctl.Session.notes`."""
        return AsyncNotebook(self)

    def signal(self, name: str) -> AsyncSignal:
        """As :meth:`meshctl.Session.signal`."""
        return AsyncSignal(self, name)

    def once(self, key: str, ttl: float | None = None, note: str = "") -> AsyncOnce:
        """As :meth:`meshctl.Session.once` (``async with s.once(KEY) as first``)."""
        return AsyncOnce(self, key, ttl, note)

    async def _do(self, call: _m.Call[T]) -> T:
        """Make one of :mod:`meshctl._messaging`'s calls for this session."""
        if not call.needed:
            return call.idle
        return call.result(await self._mcall(call.method, call.params, call.wait))

    async def _mcall(self, method: str, params: dict[str, Any], wait: float = 0.0) -> Any:
        """One call for this session; None when it is a no-op (not active, failing open).
        When the daemon forgot *this* session, it registers again and retries once."""
        if not self.active:
            return None
        timeout = self.mesh.timeout + wait if wait else None
        generation = self._core.generation
        try:
            return await self.mesh.call(
                method, {**params, "session_id": self.session_id}, timeout=timeout
            )
        except (SessionExpired, UnknownSession) as exc:
            if exc.data.get("session_id") != self.session_id:
                raise
            await self._recover(exc, generation)
        return await self.mesh.call(
            method, {**params, "session_id": self.session_id}, timeout=timeout
        )

    # --- claims (SPEC §5), the rules of meshctl._session ---------------------------

    @property
    def active(self) -> bool:
        """Registered with a daemon, not disabled, not ended."""
        return self._registered and not self._core.disabled and not self._ended

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
        if result is None:  # failing open
            return AsyncClaim(self, {"status": "granted", "disabled": True}, keys, guarded=False)
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
        released = [] if result is None else [str(r) for r in result.get("released") or []]
        self._core.released(released)
        return released

    async def check(self, *resources: str) -> dict[str, Any]:
        """``claim.check``: overlapping claims of others, and sessions present there."""
        params: dict[str, Any] = {"resources": _claims.resolve_all(resources)}
        if self.active:
            params["session_id"] = self.session_id
        result = await self.mesh.call(_claims.CHECK, params)
        return {} if result is None else dict(result)

    # --- internals ---------------------------------------------------------------

    async def _register(self) -> bool:
        """Register (or register again under the same id); False when unreachable."""
        core = self._core
        result = await self.mesh.call("session.register", core.register_params())
        if result is None:  # failing open
            core.unreachable()
            return False
        core.registered(result, self.mesh.daemon, self._interval_override)
        self._registered = True
        if core.disabled:
            log.warning(
                "Session Mesh is disabled in its config (enabled = false): session %s does nothing",
                core.session_id,
            )
        return True

    async def _heartbeat(self, params: dict[str, Any]) -> Any:
        generation = self._core.generation
        try:
            result = await self.mesh.call("session.heartbeat", params)
        except (SessionExpired, UnknownSession) as exc:
            await self._recover(exc, generation)
            result = await self.mesh.call("session.heartbeat", self._core.heartbeat_params({}))
        if result is None:  # failing open
            return None
        for message in self._core.heard(result):
            self._record(message)
        if self.mesh.daemon != self._core.daemon:
            old = self._core.daemon
            again = await self.mesh.call("session.register", self._core.register_params())
            if again is None:
                return result
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
            if result is not None and not result.get("valid", False):
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
        """Heartbeat every interval (register first while failing open); back off while
        the daemon cannot be reached -- the blocking session's rhythm."""
        wait = self._core.interval if self._registered else BACKOFF_FIRST
        with self._scope:
            while True:
                await anyio.sleep(wait)
                try:
                    async with self._lock:
                        if self._ended:
                            return
                        if not self._registered:
                            ok = await self._register()
                        else:
                            beat = await self._heartbeat(self._core.heartbeat_params({}))
                            ok = beat is not None
                except MeshUnavailable as exc:
                    log.debug("heartbeat: %s", exc)
                    ok = False
                except MeshError as exc:
                    log.warning("Session Mesh heartbeat failed: %s", exc)
                    ok = True
                if ok:
                    self.beats += 1
                    wait = self._core.interval if self._registered else BACKOFF_FIRST
                elif not self._registered:
                    wait = BACKOFF_FIRST
                else:
                    wait = min(max(wait * 2, BACKOFF_FIRST), BACKOFF_MAX)


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
