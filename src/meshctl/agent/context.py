"""What a frontend supplies to the tool handlers: the :class:`Context` of one call.

One context stands for one call of one tool by one session. The handlers never
reach the daemon, the clock or the frontend's state any other way, so the same
handler serves the Hermes plugin (whose context wraps its per-process runtime)
and an MCP server (whose context wraps its connection).
"""

from __future__ import annotations

from typing import Any, Protocol


class Refused(Exception):
    """The daemon answered a call with an error (it refused; it was reachable).

    ``code`` is the error's stable ``data.code`` string (``NOT_FOUND``,
    ``INVALID_PARAMS``, …; SPEC §3), ``data`` the rest of its ``data``.
    """

    def __init__(self, message: str, code: str = "", data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.data = dict(data or {})


class Context(Protocol):
    """One tool call's view of the mesh, supplied by the frontend."""

    @property
    def session_id(self) -> str:
        """The calling session's mesh id (registered by the frontend)."""

    @property
    def cwd(self) -> str:
        """The folder relative paths are resolved against (the session's working folder)."""

    def call(self, method: str, params: dict[str, Any], timeout: float | None = None) -> Any:
        """One request to the daemon; its result.

        Fail-open: returns None when the daemon is unreachable, hung, or sent
        something unreadable (the frontend backs off; the handler reports "the
        mesh daemon is unreachable"). Raises :class:`Refused` when the daemon
        answered with an error. ``timeout``: seconds for a call that waits on the
        daemon's side (an ask, a signal wait); None: the frontend's short default.
        """

    def has_method(self, method: str) -> bool:
        """Whether the daemon serves ``method`` (an older daemon may not)."""

    def arrived(self) -> str:
        """Framed text of what arrived for this session since the last call (inbox
        items: questions, messages, notices), acknowledged; empty when nothing did,
        or when the frontend hands it over another way (Hermes: its hooks)."""

    def asker(self, query_id: int) -> str | None:
        """Who asked question ``query_id`` the frontend showed the model (a reply
        after the ask timed out goes to the asker's inbox); None when unknown."""

    def claimed(self, ttl: float) -> None:
        """The session was granted claims with this ttl (a frontend that refreshes
        them while the session is active remembers it; others do nothing)."""
