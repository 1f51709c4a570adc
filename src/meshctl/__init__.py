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

    from meshctl._async.claim import AsyncClaim
    from meshctl._async.client import AsyncMesh
    from meshctl._async.events import AsyncSessionEvents
    from meshctl._async.preempt import AsyncPreemptWatcher
    from meshctl._async.responder import AsyncResponder
    from meshctl._async.session import AsyncSession
    from meshctl._async.shared import AsyncNotebook, AsyncOnce, AsyncSignal
    from meshctl._core.messaging import (
        Answer,
        Broadcast,
        Handoff,
        Item,
        Query,
        RequestedHandoff,
        Sent,
    )
    from meshctl._core.shared import Note, SignalRecord
    from meshctl._events import PreemptEvent
    from meshctl._sync.claim import Claim
    from meshctl._sync.client import Mesh
    from meshctl._sync.events import SessionEvents
    from meshctl._sync.preempt import PreemptWatcher
    from meshctl._sync.responder import Responder
    from meshctl._sync.session import Session
    from meshctl._sync.shared import Notebook, Once, Signal
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
    "AsyncPreemptWatcher",
    "AsyncResponder",
    "AsyncSession",
    "AsyncSessionEvents",
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
    "AsyncMesh": "meshctl._async.client",
    "AsyncSessionEvents": "meshctl._async.events",
    "AsyncPreemptWatcher": "meshctl._async.preempt",
    "AsyncResponder": "meshctl._async.responder",
    "AsyncClaim": "meshctl._async.claim",
    "AsyncSession": "meshctl._async.session",
    **dict.fromkeys(("AsyncNotebook", "AsyncOnce", "AsyncSignal"), "meshctl._async.shared"),
    **dict.fromkeys(
        ("Answer", "Broadcast", "Handoff", "Item", "Query", "RequestedHandoff", "Sent"),
        "meshctl._core.messaging",
    ),
    **dict.fromkeys(("Note", "SignalRecord"), "meshctl._core.shared"),
    "PreemptEvent": "meshctl._events",
    "Mesh": "meshctl._sync.client",
    "SessionEvents": "meshctl._sync.events",
    "PreemptWatcher": "meshctl._sync.preempt",
    "Responder": "meshctl._sync.responder",
    "Claim": "meshctl._sync.claim",
    "Session": "meshctl._sync.session",
    **dict.fromkeys(("Notebook", "Once", "Signal"), "meshctl._sync.shared"),
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
