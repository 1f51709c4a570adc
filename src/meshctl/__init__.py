"""Session Mesh client library: ``Mesh`` (blocking) and ``AsyncMesh`` (anyio).

::

    from meshctl import Mesh, MeshError, MeshUnavailable

    mesh = Mesh(profile="default")      # starts the daemon if none runs
    with mesh.session(task="refactor auth", source="cli") as s:
        ...

Importing this package costs nothing: each name below loads its module on first
use. ``Mesh`` and the error tree use the standard library only; ``AsyncMesh``
(which needs anyio) loads only when asked for.

Errors form one tree, rooted at :class:`MeshError` (drawn in
``meshd.protocol.errors``): ``MeshUnavailable`` when the daemon cannot be reached,
``MeshTimeout``, ``MeshProtocolError`` (``FrameTooLarge``) and one class per wire
``data.code`` (``SessionExpired``, ``QueryRefused`` …).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from typing import Any

    from meshctl._async import AsyncMesh, AsyncSession
    from meshctl._async_listen import AsyncResponder, SessionEvents
    from meshctl._async_session import AsyncClaim
    from meshctl._async_shared import AsyncNotebook, AsyncOnce, AsyncSignal
    from meshctl._events import PreemptEvent
    from meshctl._messaging import (
        Answer,
        Broadcast,
        Handoff,
        Item,
        Query,
        RequestedHandoff,
        Sent,
    )
    from meshctl._preempt import PreemptWatcher
    from meshctl._responder import Responder
    from meshctl._shared import Note, Notebook, Once, Signal, SignalRecord
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

__all__ = [
    "Answer",
    "AsyncClaim",
    "AsyncMesh",
    "AsyncNotebook",
    "AsyncOnce",
    "AsyncResponder",
    "AsyncSession",
    "AsyncSignal",
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
    "Notebook",
    "Once",
    "ParseError",
    "PreemptEvent",
    "PreemptWatcher",
    "ProfileMismatch",
    "Query",
    "QueryRefused",
    "RequestedHandoff",
    "Responder",
    "Sent",
    "Session",
    "SessionEvents",
    "SessionExpired",
    "Signal",
    "SignalRecord",
    "StorageUnavailable",
    "TooLarge",
    "UnknownSession",
    "UntrustedSocket",
]

#: Where each public name lives. Nothing is imported until a name is first used, so
#: ``meshctl`` (the CLI's entry point lives under this package) starts without the
#: client library, and ``import meshctl`` stays cheap for the library's users too.
_WHERE: dict[str, str] = {
    **dict.fromkeys(("AsyncMesh", "AsyncSession"), "meshctl._async"),
    **dict.fromkeys(("AsyncResponder", "SessionEvents"), "meshctl._async_listen"),
    "AsyncClaim": "meshctl._async_session",
    **dict.fromkeys(("AsyncNotebook", "AsyncOnce", "AsyncSignal"), "meshctl._async_shared"),
    "PreemptEvent": "meshctl._events",
    **dict.fromkeys(
        ("Answer", "Broadcast", "Handoff", "Item", "Query", "RequestedHandoff", "Sent"),
        "meshctl._messaging",
    ),
    "PreemptWatcher": "meshctl._preempt",
    "Responder": "meshctl._responder",
    **dict.fromkeys(("Note", "Notebook", "Once", "Signal", "SignalRecord"), "meshctl._shared"),
    "Mesh": "meshctl._sync",
    "Claim": "meshctl._sync_claim",
    "Session": "meshctl._sync_session",
}


def __getattr__(name: str) -> Any:
    """Load a public name on first use (the anyio client only when someone asks for it)."""
    module = _WHERE.get(name) or ("meshd.protocol.errors" if name in __all__ else None)
    if module is None:
        raise AttributeError(f"module 'meshctl' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
