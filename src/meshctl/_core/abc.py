"""Where a connection goes: the one interface both clients' connections take.

A connection of its own (:class:`meshctl._blocking.Connection`,
:class:`meshctl._async.connection.AsyncConnection`) is opened "like" a client: to the
same profile and socket, with its autostart rule and timeout. It names that client
through :class:`Target` rather than ``Mesh`` or ``AsyncMesh``, so the connection
modules sit beneath the clients that import them (the role anyio's ``abc`` plays).
The session layer's own interfaces, built on this one, are
:mod:`meshctl._async.abc` and its blocking twin.

Typing only: imported under ``TYPE_CHECKING``, never at run time.
"""

from __future__ import annotations

from typing import Protocol


class Target(Protocol):
    """A client's daemon and manners, as a connection of its own copies them."""

    @property
    def profile(self) -> str: ...

    @property
    def socket_path(self) -> str | None: ...

    @property
    def autostart(self) -> bool: ...

    @property
    def timeout(self) -> float: ...
