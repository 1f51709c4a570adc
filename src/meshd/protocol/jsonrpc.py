"""JSON-RPC 2.0 envelopes and dispatch, sans I/O (jsonrpc.org/specification, STYLE §2.1).

``params`` stays raw until the method is known, so each method decodes them
with its own typed Struct and an error names the exact JSON path.

:class:`Dispatcher` turns one received frame (a line, without its newline) into
the reply frame, or ``None``: envelope checks, batches, method lookup, params,
the handler call, and the one mapping from an exception to an error object. It
reads and writes nothing: the server hands it lines (:meth:`Dispatcher.prepare`,
:meth:`Dispatcher.batch`) and writes what comes back, and decides how the calls
marked ``concurrent`` run, so every rule of SPEC §3 about frames can be tested
without a socket.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from meshd.protocol.errors import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    InvalidParams,
    MeshError,
    NoSession,
    TooLarge,
)

log = logging.getLogger("meshd.server")

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


_FIELD_MESSAGES = ("Object missing required field `", "Object contains unknown field `")


def split_path(message: str) -> tuple[str, str]:
    """Split msgspec's ``"... - at `$.x`"`` into ``("...", "$.x")``.

    msgspec puts a missing or unknown field at the object that lacks or has it
    (``$``); SPEC §3 wants the path *of the field*, so its name is appended
    (``$.session_id``), and a client can point at what to fix."""
    head, sep, tail = message.rpartition(" - at `")
    msg, path = (head, tail.rstrip("`")) if sep else (message, "$")
    for start in _FIELD_MESSAGES:
        if msg.startswith(start) and msg.endswith("`"):
            path = f"{path}.{msg[len(start) : -1]}"
    return msg, path


_OVER_LONG = re.compile(r"^Expected `(str|array|object)` of length <= (\d+)$")
"""msgspec's sentence for a value over a schema's ``max_length``: a string, a list or
a map longer than its field allows, which SPEC §4 refuses with ``TOO_LARGE``."""
_UNITS = {"str": "characters", "array": "values", "object": "entries"}
_NO_SESSION_MESSAGES = ("Object missing required field `session_id`", "Expected `str`, got `null`")
_NO_SESSION = (
    "no session_id given: this method acts for a session, and none was given "
    "(register one with session.register)"
)


PARSE_ERROR_REPLY = encoder.encode(
    error_response(None, error_object(PARSE_ERROR, "Parse error", {"code": "PARSE_ERROR"}))
)
EMPTY_BATCH_REPLY = encoder.encode(
    error_response(
        None,
        error_object(INVALID_REQUEST, "Invalid request: empty batch", {"code": "INVALID_REQUEST"}),
    )
)

_DEEP_MESSAGE = "Invalid request: nested too deeply to decode"
TOO_DEEP_REPLY = encoder.encode(
    error_response(None, error_object(INVALID_REQUEST, _DEEP_MESSAGE, {"code": "INVALID_REQUEST"}))
)
"""msgspec raises RecursionError (not DecodeError) past Python's recursion limit; a frame
nested that deeply is refused like any other invalid request, and the line stays open."""
_INTERNAL = error_object(INTERNAL_ERROR, "Internal error", {"code": "INTERNAL"})
_EMPTY_PARAMS = b"{}"


class Handler(NamedTuple):
    """One method: how its params decode, the function, and how it runs."""

    decode: Callable[[bytes], Any]
    fn: Callable[[Any, Any], Any]
    is_async: bool
    concurrent: bool
    """May wait (waits, asks): the handler returns a :class:`Later` for what waits, and
    the connection goes on serving meanwhile."""


def decode_params(h: Handler, raw: bytes | Raw | None) -> Any:
    """``params`` decoded by the method's own Struct; InvalidParams names the JSON path."""
    try:
        return h.decode(raw or _EMPTY_PARAMS)
    except msgspec.ValidationError as exc:
        msg, path = split_path(str(exc))
        if path == "$.session_id" and (msg in _NO_SESSION_MESSAGES or "length >= 1" in msg):
            raise NoSession(_NO_SESSION, {"path": path}) from exc  # SPEC §3: NO_SESSION
        over = _OVER_LONG.match(msg)
        if over is not None:  # SPEC §4: over-long fields are refused with TOO_LARGE
            limit, unit = int(over.group(2)), _UNITS[over.group(1)]
            raise TooLarge(
                f"{path.removeprefix('$.')} is over its limit of {limit} {unit}",
                {"path": path, "limit": limit},
            ) from exc
        raise InvalidParams(f"Invalid params: {msg}", {"path": path}) from exc
    except msgspec.DecodeError as exc:
        raise InvalidParams(f"Invalid params: {exc}", {"path": "$"}) from exc
    except RecursionError as exc:
        raise InvalidParams("Invalid params: nested too deeply", {"path": "$"}) from exc


@dataclass(slots=True)
class Call:
    """One request on its way to its handler: the per-request context."""

    method: str
    handler: Handler
    params: Any
    rid: Id
    notify: bool
    """No ``id``: a notification, answered with nothing (not even an error)."""


class Dispatcher:
    """From a frame to the calls it asks for and their replies, given the method table
    (``lookup``). The server decides where each call runs (see meshd.server.serve)."""

    def __init__(self, lookup: Callable[[str], Handler]) -> None:
        self.lookup = lookup

    @staticmethod
    def batch(body: bytes) -> list[Raw] | bytes:
        """A batch frame's elements, or the one reply when it has none to answer."""
        try:
            items = batch_decoder.decode(body)
        except msgspec.DecodeError:
            return PARSE_ERROR_REPLY
        except RecursionError:
            return TOO_DEEP_REPLY
        return items if items else EMPTY_BATCH_REPLY

    async def frame(self, line: bytes, conn: Any) -> bytes | None:
        """The reply to one frame (``None`` for notifications and blank lines), every
        handler run to its end in turn, a batch's elements too. The server does the same
        but lets the ``concurrent`` calls that wait go on while it serves others."""
        body = line.strip()
        if not body:
            return None
        if body[0] == 0x5B:  # "[": a batch
            items = self.batch(body)
            if isinstance(items, bytes):
                return items
            replies = [r for item in items if (r := await self.request(item, conn))]
            return b"[" + b",".join(replies) + b"]" if replies else None
        return await self.request(body, conn)

    async def request(self, raw: bytes | Raw, conn: Any) -> bytes | None:
        """One request's reply, its handler run to its end."""
        call = self.prepare(raw)
        return await run(call, conn) if isinstance(call, Call) else call

    def prepare(self, raw: bytes | Raw) -> Call | bytes | None:
        """The call one request asks for, or the reply it gets instead (an error frame;
        ``None`` for a notification that cannot be called)."""
        try:
            req = request_decoder.decode(raw)
        except msgspec.ValidationError as exc:
            msg = f"Invalid request: {exc}"
            err = error_object(INVALID_REQUEST, msg, {"code": "INVALID_REQUEST"})
            try:
                rid = recover_id(raw)
            except RecursionError:  # the id itself is nested too deeply
                rid = None
            return encoder.encode(error_response(rid, err))
        except msgspec.DecodeError:
            return PARSE_ERROR_REPLY
        except RecursionError:
            return TOO_DEEP_REPLY
        rid = req.id if req.id is not UNSET else None
        notify = req.id is UNSET
        if req.jsonrpc != "2.0":
            err = error_object(
                INVALID_REQUEST,
                'Invalid request: jsonrpc must be "2.0"',
                {"code": "INVALID_REQUEST"},
            )
            return None if notify else encoder.encode(error_response(rid, err))
        try:
            h = self.lookup(req.method)
            try:
                params = decode_params(h, None if req.params is UNSET else req.params)
            except RecursionError as exc:
                raise InvalidParams(_DEEP_MESSAGE, {"path": "$"}) from exc
        except Exception as exc:
            return failure(req.method, rid, notify, exc)
        return Call(req.method, h, params, rid, notify)


class Later:
    """A reply that comes later, owed by a record instead of a waiting task.

    A ``concurrent`` handler whose request must wait for something a callback will
    tell (a queued claim: a grant after its commit, a timeout, a withdrawal) returns
    one of these instead of awaiting: no task, no coroutine frames held while it
    waits. Whoever tells the outcome calls :meth:`settle` once; the server's reply
    is written then (:meth:`bind`). If the caller goes away first (its connection
    closed), the server calls :meth:`cancel`, which runs :meth:`withdraw` (what a
    subclass undoes) and answers nothing. A caller that runs in a task of its own
    (a handler composed of others) awaits :meth:`outcome` instead.

    In a storm of 10,000 queued acquires each used to be a task with five coroutine
    frames, all tracked by the cyclic collector while they waited.
    """

    __slots__ = ("_sink", "done", "error", "method", "notify", "result", "rid")

    def __init__(self) -> None:
        self._sink: Callable[[Later], None] | None = None
        self.done = False
        """Settled or cancelled: nothing more happens to it."""
        self.result: Any = None
        self.error: BaseException | None = None
        self.method = ""
        self.rid: Id = None
        self.notify = False
        """The request it answers (set by the server): what :func:`reply` needs, kept
        here rather than in a reply sink of its own per waiting request."""

    def settle(self, result: Any = None, error: BaseException | None = None) -> None:
        """The outcome: ``result``, or ``error`` (answered as a failure). Once only."""
        if self.done:
            return
        self.done = True
        self.result, self.error = result, error
        sink, self._sink = self._sink, None
        if sink is not None:
            sink(self)

    def bind(self, sink: Callable[[Later], None]) -> None:
        """Call ``sink(self)`` once settled (now, if it is already)."""
        if self.done:
            sink(self)
        else:
            self._sink = sink

    def cancel(self) -> None:
        """Its caller went away: withdraw what it waits for; no reply."""
        if not self.done:
            self.done = True
            self._sink = None
            self.withdraw()

    def withdraw(self) -> None:
        """Undo the wait (a subclass's): called by :meth:`cancel`, never after :meth:`settle`."""

    async def settled(self) -> None:
        """Wait in this task until settled (cancelled meanwhile, it withdraws)."""
        if not self.done:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def wake(_: Later) -> None:
                if not fut.done():
                    fut.set_result(None)

            self.bind(wake)
            try:
                await fut
            except asyncio.CancelledError:
                self.cancel()
                raise

    async def outcome(self) -> Any:
        """Wait in this task until settled: the result, or the error raised."""
        await self.settled()
        if self.error is not None:
            raise self.error
        return self.result

    @staticmethod
    def running(work: Coroutine[Any, Any, Any]) -> Later:
        """A reply that comes when ``work`` is done: the one way a handler waits.

        A ``concurrent`` handler does in order what must come before the next request
        (the first try, a commit), then returns this for the part that waits (an ask
        to another host, a fleet-wide claim in line, a signal): ``work`` runs in a task
        of its own, its return value (or the error it raises) is the reply, and the
        connection reads on at once. Withdrawn (its caller hung up), the task is
        cancelled. What waits for a callback instead needs no task: a plain
        :class:`Later` settled by it (a queued claim, a local ask)."""
        return _Running(work)


class _Running(Later):
    """:meth:`Later.running`: settled by a task running ``work``; cancelled by
    :meth:`withdraw`."""

    __slots__ = ("_task",)

    def __init__(self, work: Coroutine[Any, Any, Any]) -> None:
        super().__init__()
        self._task = asyncio.get_running_loop().create_task(self._run(work))

    async def _run(self, work: Coroutine[Any, Any, Any]) -> None:
        try:
            result = await work
        except Exception as exc:  # the reply says it (failure(): INTERNAL for a bug)
            self.settle(error=exc)
        else:
            self.settle(result)

    def withdraw(self) -> None:
        self._task.cancel()


async def start(call: Call, conn: Any) -> bytes | Later | None:
    """Call the handler: its reply frame (None to a notification), or the :class:`Later`
    it returned when its request has to wait (the caller answers it with :func:`reply`)."""
    h = call.handler
    try:
        result = await h.fn(call.params, conn) if h.is_async else h.fn(call.params, conn)
    except Exception as exc:
        return failure(call.method, call.rid, call.notify, exc)
    if isinstance(result, Later):
        return result
    if call.notify:
        return None
    try:
        return encoder.encode(response(call.rid, result))
    except Exception as exc:  # a result the encoder refuses: a bug, answered as one
        return failure(call.method, call.rid, call.notify, exc)


def reply(later: Later, method: str, rid: Id, notify: bool) -> bytes | None:
    """The reply frame of a settled :class:`Later` to request ``rid`` of ``method``
    (None to a notification). Not the :class:`Call`: a waiting request keeps only these,
    not its decoded params."""
    if later.error is not None:
        error = later.error
        if not isinstance(error, Exception):
            error = RuntimeError(repr(error))
        return failure(method, rid, notify, error)
    if notify:
        return None
    try:
        return encoder.encode(response(rid, later.result))
    except Exception as exc:  # as in start(): INTERNAL, not a reply never written
        return failure(method, rid, notify, exc)


async def run(call: Call, conn: Any) -> bytes | None:
    """Call the handler; its result or its error as a reply frame (None to a notification).

    A :class:`Later` it returns is waited for here, in this task."""
    out = await start(call, conn)
    if not isinstance(out, Later):
        return out
    await out.settled()
    return reply(out, call.method, call.rid, call.notify)


def failure(method: str, rid: Id, notify: bool, exc: Exception) -> bytes | None:
    """The one mapping from an exception to an error frame: a :class:`MeshError` says
    its own code; anything else is a bug, logged, and answered ``INTERNAL``.

    The error itself may not encode (a message or ``data`` the encoder refuses: a
    string that is not UTF-8, an object it does not know): then its code and message
    with only ``data.code``, and if even that fails a plain ``INTERNAL``, which always
    does. Raised from here, the caller got no reply at all, or the connection's frame
    loop died (it answers the request in flight with this)."""
    if isinstance(exc, MeshError):
        err = exc.to_wire()
    else:
        log.error("internal error in %s", method, exc_info=exc)
        err = _INTERNAL
    if notify:
        return None
    try:
        return encoder.encode(error_response(rid, err))
    except Exception:
        log.exception("the error reply to %s could not be encoded", method)
    try:  # what it says without what it carried
        code = err["data"]["code"] if isinstance(exc, MeshError) else "INTERNAL"
        return encoder.encode(
            error_response(rid, error_object(err["code"], err["message"], {"code": code}))
        )
    except Exception:
        return encoder.encode(error_response(rid, _INTERNAL))
