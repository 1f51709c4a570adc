"""Session Mesh client library: ``Mesh`` (blocking) and ``AsyncMesh`` (anyio).

::

    from meshctl import Mesh, MeshError, MeshUnavailable

    mesh = Mesh(profile="default")      # starts the daemon if none runs
    with mesh.session(task="refactor auth", source="cli") as s:
        ...

Importing this package stays cheap: ``Mesh`` and the error tree use the standard
library only, and ``AsyncMesh`` (which needs anyio) loads on first use.

Errors form one tree, rooted at :class:`MeshError` (drawn in
``meshd.protocol.errors``): ``MeshUnavailable`` when the daemon cannot be reached,
``MeshTimeout``, ``MeshProtocolError`` (``FrameTooLarge``) and one class per wire
``data.code`` (``SessionExpired``, ``QueryRefused`` …).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from meshctl._messaging import Answer, Broadcast, Handoff, Item, Query, Sent
from meshctl._responder import Responder
from meshctl._shared import Note, Once, SignalRecord
from meshctl._sync import Mesh
from meshctl._sync_claim import Claim
from meshctl._sync_session import Session
from meshd.protocol.errors import (
    BadKey,
    BudgetExceeded,
    Cycle,
    Forbidden,
    FrameTooLarge,
    IdInUse,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MeshDisabled,
    MeshError,
    MeshProtocolError,
    MeshTimeout,
    MeshUnavailable,
    MessageRefused,
    MethodNotFound,
    NoSession,
    NotFound,
    ParseError,
    ProfileMismatch,
    QueryRefused,
    SessionExpired,
    StorageUnavailable,
    TooLarge,
    UnknownSession,
    UntrustedSocket,
)

if TYPE_CHECKING:
    from meshctl._async import AsyncMesh, AsyncSession

__all__ = [
    "Answer",
    "AsyncMesh",
    "AsyncSession",
    "BadKey",
    "Broadcast",
    "BudgetExceeded",
    "Claim",
    "Cycle",
    "Forbidden",
    "FrameTooLarge",
    "Handoff",
    "IdInUse",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "Item",
    "Mesh",
    "MeshDisabled",
    "MeshError",
    "MeshProtocolError",
    "MeshTimeout",
    "MeshUnavailable",
    "MessageRefused",
    "MethodNotFound",
    "NoSession",
    "NotFound",
    "Note",
    "Once",
    "ParseError",
    "ProfileMismatch",
    "Query",
    "QueryRefused",
    "Responder",
    "Sent",
    "Session",
    "SessionExpired",
    "SignalRecord",
    "StorageUnavailable",
    "TooLarge",
    "UnknownSession",
    "UntrustedSocket",
]

_LAZY = {"AsyncMesh", "AsyncSession"}


def __getattr__(name: str) -> Any:
    """Load the anyio client only when someone asks for it."""
    if name in _LAZY:
        from meshctl import _async

        value = getattr(_async, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'meshctl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)
