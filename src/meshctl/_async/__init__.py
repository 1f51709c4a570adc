"""The anyio client: ``AsyncMesh`` and its session layer.

Hand-written I/O: :mod:`~meshctl._async.client` (the connection and its reader task),
:mod:`~meshctl._async.connection` (connections of their own), ``_backend`` (tasks,
locks). The one source of the session layer -- ``session``, ``shared``,
``responder``, ``preempt``, ``events`` and the Protocols they name their client and
session by (``abc``) -- from which ``scripts/unasync.py`` generates the blocking
:mod:`meshctl._sync` twins.
"""

from meshctl._async.client import AsyncMesh
from meshctl._async.session import AsyncSession

__all__ = ["AsyncMesh", "AsyncSession"]
