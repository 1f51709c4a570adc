"""``AsyncClaim``: what one claim call got (SPEC §5), released when its block ends.

One source for both drivers: ``scripts/unasync.py`` writes the blocking ``Claim``
(:mod:`meshctl._sync.claim`) from this file. What the call got -- granted, holders,
the token, what it acquired, whether it is lost -- is the I/O-free
:class:`meshctl._core.session.ClaimRecord`'s; this class asks the daemon (``validate``,
``release``) and releases on leaving the block, never raising on the way out.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any

from meshctl import _claims
from meshctl import _log as log
from meshctl._async import _backend
from meshctl._core import session as _session
from meshd.protocol.errors import MeshError

if TYPE_CHECKING:
    from meshctl._async.abc import AsyncSessionLike


class AsyncClaim(_session.ClaimRecord):
    """What one :meth:`~meshctl._async.session.AsyncSession.claim` call got; releases
    what it acquired when its block ends. The fields are
    :class:`meshctl._core.session.ClaimRecord`'s; call :meth:`validate` to ask the
    daemon now whether the token still holds."""

    def __init__(
        self,
        session: AsyncSessionLike,
        result: dict[str, Any],
        requested: list[str],
        *,
        guarded: bool,
    ) -> None:
        self.session = session
        super().__init__(session._core, result, requested, guarded=guarded)

    def _noticed(self, token: int | None, keys: list[str]) -> bool:
        """A claim-loss event for ``token`` among the events the session's connection
        kept aside; heartbeats report losses either way."""
        return self.session.mesh._pushed_loss(token, keys)

    async def validate(self) -> bool:
        """Ask the daemon whether every key of the set is still held under its token
        (fencing; a key held before this call keeps its own token: :attr:`tokens`)."""
        if not self.granted or not self.guarded:
            return self.granted
        call = self.session.mesh.call
        return self._validated(
            [
                await call(_claims.VALIDATE, {"resource": k, "token": t})
                for k, t in self.tokens.items()
            ]
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
        with _backend.shielded():
            try:
                await self.release()
            except MeshError as failure:
                # Never raise on the way out; say so, and keep it on the handle. The claim
                # goes when the session ends or expires (or its ttl runs out).
                log.warning("Session Mesh: %s", self._release_failed(failure))
