"""The anyio client: ``AsyncMesh`` and its session layer.

Hand-written: :mod:`~meshctl._async.client` (the connection and its reader task) and
the connections of their own (:mod:`~meshctl._async.connection`, ``events``,
``responder``, ``preempt``). :mod:`~meshctl._async.session` and
:mod:`~meshctl._async.shared` are the one source of the session layer:
``scripts/unasync.py`` generates the blocking :mod:`meshctl._sync` twins from them.
"""

from meshctl._async.client import AsyncMesh
from meshctl._async.session import AsyncSession

__all__ = ["AsyncMesh", "AsyncSession"]
