"""The interfaces the session layer meets its client at (the role anyio's ``abc`` plays).

The session layer -- ``session``, ``claim``, ``shared``, ``responder``, ``preempt``,
``events`` and the ``_backend`` beneath them -- names the client that made it and
the session its parts work for through these Protocols, never through
:mod:`meshctl._async.client` or :mod:`meshctl._async.session` (which import those
parts): imports run one way, from the client down.

One source for both drivers: ``scripts/unasync.py`` writes :mod:`meshctl._sync.abc`
from this file. Typing only: imported under ``TYPE_CHECKING``, never at run time.
"""

from __future__ import annotations

from typing import Any, Protocol

from meshctl._core.abc import Target
from meshctl._core.session import SessionCore


class AsyncClient(Target, Protocol):
    """What the session layer asks of its client (``AsyncMesh``)."""

    @property
    def daemon(self) -> tuple[Any, Any]:
        """(pid, started_at) of the daemon the client's connection reached."""
        ...

    async def call(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """One request and its result (None when failing open)."""
        ...

    async def query_cap(self) -> float:
        """The daemon's ``max_query_timeout``."""
        ...

    async def aclose(self) -> None: ...

    def _pushed_loss(self, token: int | None, keys: list[str]) -> bool:
        """Whether a pushed event told of losing ``keys`` under ``token``."""
        ...


class AsyncSessionLike(Protocol):
    """What a session's parts (a claim, notes, signals, once, a responder, a
    preemption watcher, the heartbeats) ask of their session (``AsyncSession``)."""

    @property
    def mesh(self) -> AsyncClient: ...

    @property
    def session_id(self) -> str | None: ...

    @property
    def active(self) -> bool: ...

    @property
    def disabled(self) -> bool: ...

    @property
    def _core(self) -> SessionCore:
        """The session's I/O-free half (claim bookkeeping)."""
        ...

    async def release(self, *resources: str) -> list[str]:
        """Release ``resources``; what the daemon released."""
        ...

    def _check_usable(self) -> None:
        """Raise when the session was ended or never started (it can act for nothing)."""
        ...

    async def _mcall(self, method: str, params: dict[str, Any], wait: float = 0.0) -> Any:
        """One call for this session; None when it is a no-op."""
        ...
