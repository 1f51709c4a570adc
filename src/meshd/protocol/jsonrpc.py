"""JSON-RPC 2.0 envelopes, sans I/O (jsonrpc.org/specification, STYLE §2.1).

``params`` stays raw until the method is known, so each method decodes them
with its own typed Struct and an error names the exact JSON path.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from meshd.protocol.errors import INVALID_REQUEST, PARSE_ERROR

Id = int | str | None


class Request(Struct):
    """A request or (without ``id``) a notification."""

    jsonrpc: str
    method: str
    params: Raw | UnsetType = UNSET
    id: int | str | UnsetType | None = UNSET


class _IdOnly(Struct):
    id: Any = None


class Response(Struct):
    """A result; build with :func:`response` so ``jsonrpc`` comes first on the wire."""

    jsonrpc: str
    id: Id
    result: Any


class ErrorResponse(Struct):
    jsonrpc: str
    id: Id
    error: dict[str, Any]


class Notification(Struct):
    jsonrpc: str
    method: str
    params: Any


def response(rid: Id, result: Any) -> Response:
    return Response("2.0", rid, result)


def error_response(rid: Id, error: dict[str, Any]) -> ErrorResponse:
    return ErrorResponse("2.0", rid, error)


def notification(method: str, params: Any) -> Notification:
    return Notification("2.0", method, params)


request_decoder = msgspec.json.Decoder(Request)
batch_decoder = msgspec.json.Decoder(list[Raw])
_id_decoder = msgspec.json.Decoder(_IdOnly)
encoder = msgspec.json.Encoder()


def recover_id(raw: bytes | Raw) -> Id:
    """The id of an invalid request, when it can be read at all (else ``null``)."""
    try:
        value = _id_decoder.decode(raw).id
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, int | str) and not isinstance(value, bool) else None


def error_object(code: int, message: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"code": code, "message": message}
    if data:
        obj["data"] = data
    return obj


def split_path(message: str) -> tuple[str, str]:
    """Split msgspec's ``"... - at `$.x`"`` into ``("...", "$.x")``."""
    head, sep, tail = message.rpartition(" - at `")
    if sep:
        return head, tail.rstrip("`")
    return message, "$"


PARSE_ERROR_REPLY = encoder.encode(
    error_response(None, error_object(PARSE_ERROR, "Parse error", {"code": "PARSE_ERROR"}))
)
EMPTY_BATCH_REPLY = encoder.encode(
    error_response(
        None,
        error_object(INVALID_REQUEST, "Invalid request: empty batch", {"code": "INVALID_REQUEST"}),
    )
)
