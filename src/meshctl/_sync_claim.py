"""``Claim``: what one blocking ``Session.claim`` call got (SPEC §5, §10).

The fields and the loss rules are :class:`meshctl._session.ClaimRecord`'s (shared with
``AsyncClaim``); this class asks the daemon (``validate``) and gives back what the
call acquired (``release``, or leaving its ``with`` block).

Standard library only.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any

from meshctl import _claims, _events, _session
from meshctl import _log as log
from meshd.protocol.errors import MeshError

if TYPE_CHECKING:
    from meshctl._sync_session import Session


class Claim(_session.ClaimRecord):
    """What one ``Session.claim`` call got; releases what it acquired when its block ends.

    The fields are :class:`meshctl._session.ClaimRecord`'s; call :meth:`validate` to
    ask the daemon now whether the token still holds.
    """

    def __init__(
        self, session: Session, result: dict[str, Any], requested: list[str], *, guarded: bool
    ) -> None:
        self.session = session
        super().__init__(session._core, result, requested, guarded=guarded)

    def _noticed(self, keys: list[str]) -> bool:
        """A claim-loss event for our token among the events the main connection kept
        aside (when something subscribed it); heartbeats report losses either way."""
        return any(
            e.token == self.token and set(e.resources) & set(keys)
            for e in _events.claim_losses(list(self.session.mesh._events))
        )

    def validate(self) -> bool:
        """Ask the daemon whether our token still holds every key of the set (fencing)."""
        if not self.granted or not self.guarded:
            return self.granted
        call = self.session.mesh.call
        return self._validated(
            [call(_claims.VALIDATE, {"resource": k, "token": self.token}) for k in self.keys]
        )

    def release(self) -> list[str]:
        """Release what this call acquired (never an ``already_held`` claim); once."""
        if self._released or not self.acquired:
            self._released = True
            return []
        self._released = True
        return self.session.release(*self.acquired)

    def __enter__(self) -> Claim:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.release()
        except MeshError as failure:
            # Never raise on the way out; say so, and keep it on the handle. The claim
            # goes when the session ends or expires (or its ttl runs out).
            log.warning("Session Mesh: %s", self._release_failed(failure))
