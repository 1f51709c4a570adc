"""``AsyncRegistration``: a session's registration with its daemon, kept up.

One source for both drivers: ``scripts/unasync.py`` writes the blocking
``Registration`` (:mod:`meshctl._sync.registration`) from this file. It registers the
session (again, under the same id, when a call finds it expired or unknown, or when
the daemon restarted), heartbeats in the background, checks every claim the session
held through this client after a new registration, and says what was lost: one
sentence each in ``SessionCore.lost``, one warning, and ``on_lost``. The words and the
bookkeeping are the I/O-free :class:`meshctl._core.session.SessionCore`'s;
:class:`~meshctl._async.session.AsyncSession` holds one registration and calls it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from meshctl import _claims
from meshctl import _log as log
from meshctl._async import _backend
from meshctl._core import session as _session
from meshctl._core.session import BACKOFF_FIRST, next_beat
from meshd.protocol.errors import MeshError, MeshUnavailable, SessionExpired, UnknownSession

if TYPE_CHECKING:
    from meshctl._async.abc import AsyncClient


class AsyncRegistration:
    """A session's registration: ``registered`` once the daemon took it (not while
    failing open), registering again once per expiry (under the second lock of
    ``_backend.session_locks``), and the background heartbeats (:meth:`run`)."""

    def __init__(
        self,
        mesh: AsyncClient,
        core: _session.SessionCore,
        *,
        on_lost: Callable[[str], Any] | None,
        interval: float | None,
    ) -> None:
        self.mesh = mesh
        self.core = core
        self.on_lost = on_lost
        #: The heartbeat interval the session was given (None: the daemon's advice).
        self.interval = interval
        self.registered = False
        #: Set once the session was started (a registration tried, reached or not).
        self.tried = False
        #: Set (under :attr:`state`) once the session ends: no heartbeat after that.
        self.ended = False
        #: The session's lock (heartbeats, ending, claims' bookkeeping).
        self.state, self._reregistering = _backend.session_locks()

    async def register(self) -> bool:
        """Register (or register again under the same id); False when unreachable."""
        core = self.core
        self.tried = True
        result = await self.mesh.call("session.register", core.register_params())
        if result is None:  # failing open
            core.unreachable()
            return False
        core.registered(result, self.mesh.daemon, self.interval)
        self.registered = True
        if core.disabled:
            log.warning(
                "Session Mesh is disabled in its config (enabled = false): session %s does nothing",
                core.session_id,
            )
        return True

    async def recover(self, exc: MeshError, generation: int) -> None:
        """A call made under registration ``generation`` found the session expired or
        unknown: register again -- unless another caller already did since, so one
        expiry is recorded once."""
        async with self._reregistering:
            if self.core.generation != generation:
                return
            old = self.core.daemon
            await self.register()
            self.record(self.core.after_expiry(exc, old, await self.validate_held()))

    async def daemon_changed(self) -> None:
        """The daemon restarted but still answered for us: register again to find out,
        then check every token this client holds (a restored claim may have run out
        meanwhile) and report exactly which claims were lost."""
        old = self.core.daemon
        result = await self.mesh.call("session.register", self.core.register_params())
        if result is None:
            return
        self.core.registered(result, self.mesh.daemon, self.interval)
        message = self.core.after_restart(old, result, await self.validate_held())
        if message is None:
            log.info("meshd restarted and restored session %s", self.core.session_id)
        else:
            self.record(message)

    async def validate_held(self) -> list[tuple[str, int]]:
        """``claim.validate`` every (key, token) this client holds; the ones that failed."""
        lost = []
        for key, token in self.core.to_validate():
            try:
                result = await self.mesh.call(_claims.VALIDATE, {"resource": key, "token": token})
            except MeshError as exc:
                log.warning("Session Mesh: could not validate %s (token %s): %s", key, token, exc)
                continue
            if result is not None and not result.get("valid", False):
                lost.append((key, token))
        self.core.invalid(lost)
        return lost

    def heard(self, result: Any) -> None:
        """Take the claim losses a heartbeat reported (``lost``); record each once."""
        for message in self.core.heard(result):
            self.record(message)

    def record(self, message: str) -> None:
        self.core.lost.append(message)
        log.warning("Session Mesh: %s", message)
        if self.on_lost is not None:
            try:
                self.on_lost(message)
            except Exception:
                log.exception("on_lost callback failed")

    # --- the heartbeats ------------------------------------------------------------

    async def run(self, mesh: AsyncClient, beats: _backend.Heartbeats) -> None:
        """Heartbeat every interval on ``mesh`` (register first while failing open); back
        off while the daemon cannot be reached (:func:`meshctl._core.session.next_beat`)."""
        # Not registered yet (failing open): poll often; the Mesh's own backoff decides
        # when a connection is really attempted, so polling costs nothing meanwhile.
        wait = self.core.interval if self.registered else BACKOFF_FIRST
        while await beats.sleep(wait):
            ok = await self._beat(mesh, beats)
            wait = next_beat(wait, ok, self.registered, self.core.interval)

    async def _beat(self, mesh: AsyncClient, beats: _backend.Heartbeats) -> bool:
        """One background heartbeat; False when the daemon could not be reached."""
        async with self.state:
            if self.ended:
                return True
            generation = self.core.generation
            try:
                if not self.registered:
                    return await self.register()
                params = self.core.heartbeat_params({})
                result = await mesh.call("session.heartbeat", params)
                if result is not None:
                    self.heard(result)
                if mesh.daemon != self.core.daemon:
                    await self.daemon_changed()
            except (SessionExpired, UnknownSession) as exc:
                try:
                    await self.recover(exc, generation)
                except MeshError as again:
                    log.warning("Session Mesh: could not register again: %s", again)
                    return False
            except MeshUnavailable as exc:
                log.debug("heartbeat: %s", exc)
                return False
            except MeshError as exc:
                log.warning("Session Mesh heartbeat failed: %s", exc)
                return False
        beats.beat()
        return True
