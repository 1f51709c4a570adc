"""The error tree shared by the daemon and every client.

Standard library only: the blocking client and the CLI import it.

Wire codes (SPEC §3) -- standard JSON-RPC codes, then the mesh table, each with a
stable ``data.code`` string that clients switch on::

    -32700 parse error        -32600 invalid request     -32601 unknown method
    -32602 invalid params     -32603 internal error
    -32001 UNKNOWN_SESSION    -32002 SESSION_EXPIRED     -32003 ID_IN_USE
    -32004 NO_SESSION         -32005 QUERY_REFUSED       -32006 MESSAGE_REFUSED
    -32007 CYCLE              -32008 BUDGET_EXCEEDED     -32009 TOO_LARGE
    -32010 BAD_KEY            -32011 MESH_DISABLED       -32012 FORBIDDEN
    -32013 UNAVAILABLE        -32014 NOT_FOUND

The Python classes form one tree::

    MeshError
     +-- MeshUnavailable          daemon unreachable / storage failed (CLI exit 69)
     |    +-- UntrustedSocket     the socket's folder or its daemon is not the user's
     |    +-- ProfileMismatch     the socket reached serves another profile
     +-- MeshProtocolError        the peer broke the wire contract
     |    +-- FrameTooLarge
     +-- MeshTimeout              no reply in time
     +-- ParseError, InvalidRequest, MethodNotFound, InvalidParams, InternalError
     +-- UnknownSession, SessionExpired, IdInUse, NoSession, QueryRefused,
         MessageRefused, Cycle, BudgetExceeded, TooLarge, BadKey, MeshDisabled,
         Forbidden, StorageUnavailable (also a MeshUnavailable), NotFound
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from typing import Any, ClassVar

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


class MeshError(Exception):
    """Base of every error the mesh raises, on either side of the socket."""

    code: ClassVar[int] = INTERNAL_ERROR
    data_code: ClassVar[str] = "INTERNAL"

    def __init__(self, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = dict(data or {})
        self.data.setdefault("code", self.data_code)

    def to_wire(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` object for this error."""
        return {"code": self.code, "message": self.message, "data": self.data}


class MeshUnavailable(MeshError):
    """The daemon cannot be reached (and could not be started), or cannot store."""

    data_code = "UNAVAILABLE"
    code = -32013


class UntrustedSocket(MeshUnavailable):
    """The client refused a socket: its folder or the daemon behind it is not the user's.

    Found by the client before sending a byte (``meshd.protocol.trust``); never on
    the wire. A ``MeshUnavailable``, so a fail-open client degrades instead of failing.
    """

    data_code = "UNTRUSTED_SOCKET"


class ProfileMismatch(MeshUnavailable):
    """The daemon at the socket serves another profile than the one asked for.

    ``MESH_SOCKET`` names one daemon, whatever ``--profile`` says; the client
    refuses rather than act on the wrong profile. Found by the client; never on the wire.
    """

    data_code = "PROFILE_MISMATCH"


class MeshProtocolError(MeshError):
    """The other side sent something that breaks the wire contract."""

    data_code = "PROTOCOL"


class FrameTooLarge(MeshProtocolError):
    """A request frame exceeded the 1 MiB limit; the daemon closed the connection."""

    data_code = "FRAME_TOO_LARGE"
    code = INVALID_REQUEST


class MeshTimeout(MeshError):
    """No reply arrived within the client's timeout."""

    data_code = "TIMEOUT"


class ParseError(MeshError):
    code = PARSE_ERROR
    data_code = "PARSE_ERROR"


class InvalidRequest(MeshError):
    code = INVALID_REQUEST
    data_code = "INVALID_REQUEST"


class MethodNotFound(MeshError):
    code = METHOD_NOT_FOUND
    data_code = "METHOD_NOT_FOUND"


class InvalidParams(MeshError):
    code = INVALID_PARAMS
    data_code = "INVALID_PARAMS"


class InternalError(MeshError):
    code = INTERNAL_ERROR
    data_code = "INTERNAL"


_CODES: dict[int, str] = {
    -32001: "UNKNOWN_SESSION",
    -32002: "SESSION_EXPIRED",
    -32003: "ID_IN_USE",
    -32004: "NO_SESSION",
    -32005: "QUERY_REFUSED",
    -32006: "MESSAGE_REFUSED",
    -32007: "CYCLE",
    -32008: "BUDGET_EXCEEDED",
    -32009: "TOO_LARGE",
    -32010: "BAD_KEY",
    -32011: "MESH_DISABLED",
    -32012: "FORBIDDEN",
    -32013: "UNAVAILABLE",
    -32014: "NOT_FOUND",
}


class UnknownSession(MeshError):
    """No session with that id is registered (or it ended long ago)."""

    code = -32001
    data_code = "UNKNOWN_SESSION"


class SessionExpired(MeshError):
    """The session existed but expired or ended: register again if it was the caller's
    own (``data.caller`` false: the addressee of a message, query or handoff ended)."""

    code = -32002
    data_code = "SESSION_EXPIRED"


class IdInUse(MeshError):
    """The session id is live under another process."""

    code = -32003
    data_code = "ID_IN_USE"


class NoSession(MeshError):
    """A command that acts for a session was given none."""

    code = -32004
    data_code = "NO_SESSION"


class QueryRefused(MeshError):
    """The target session does not accept queries."""

    code = -32005
    data_code = "QUERY_REFUSED"


class MessageRefused(MeshError):
    """The target session does not accept messages."""

    code = -32006
    data_code = "MESSAGE_REFUSED"


class Cycle(MeshError):
    """The ask would come back to a session already in its chain, or go too deep."""

    code = -32007
    data_code = "CYCLE"


class BudgetExceeded(MeshError):
    """The sender used up its message budget for the sliding minute."""

    code = -32008
    data_code = "BUDGET_EXCEEDED"


class TooLarge(MeshError):
    """A field or body is over its limit."""

    code = -32009
    data_code = "TOO_LARGE"


class BadKey(MeshError):
    """A resource key is malformed, relative, empty, of an unknown kind or too broad."""

    code = -32010
    data_code = "BAD_KEY"


class MeshDisabled(MeshError):
    """The mesh is switched off in config (``enabled = false``)."""

    code = -32011
    data_code = "MESH_DISABLED"


class Forbidden(MeshError):
    """The connecting process runs under another uid, or a session asked for what only
    another may do (remove another session's note)."""

    code = -32012
    data_code = "FORBIDDEN"


class StorageUnavailable(MeshUnavailable):
    """The daemon could not store the change; nothing was acknowledged."""

    code = -32013
    data_code = "UNAVAILABLE"


class NotFound(MeshError):
    """The thing named (message, handoff, query…) does not exist."""

    code = -32014
    data_code = "NOT_FOUND"


_BY_DATA_CODE: dict[str, type[MeshError]] = {
    cls.data_code: cls
    for cls in (
        ParseError,
        InvalidRequest,
        MethodNotFound,
        InvalidParams,
        InternalError,
        UnknownSession,
        SessionExpired,
        IdInUse,
        NoSession,
        QueryRefused,
        MessageRefused,
        Cycle,
        BudgetExceeded,
        TooLarge,
        BadKey,
        MeshDisabled,
        Forbidden,
        StorageUnavailable,
        NotFound,
        FrameTooLarge,
    )
}
_BY_CODE: dict[int, type[MeshError]] = {
    PARSE_ERROR: ParseError,
    INVALID_REQUEST: InvalidRequest,
    METHOD_NOT_FOUND: MethodNotFound,
    INVALID_PARAMS: InvalidParams,
    INTERNAL_ERROR: InternalError,
}


def error_from_wire(error: Any) -> MeshError:
    """Turn a JSON-RPC ``error`` object into the matching exception instance."""
    if not isinstance(error, dict):
        return MeshProtocolError(f"malformed error object: {error!r}")
    data = error.get("data")
    data = data if isinstance(data, dict) else {}
    message = str(error.get("message", "error"))
    cls = _BY_DATA_CODE.get(str(data.get("code", ""))) or _BY_CODE.get(error.get("code", 0))
    return (cls or MeshError)(message, data)
