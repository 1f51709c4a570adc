"""The wire, without I/O: shared by the blocking and the async client.

What crosses the socket (SPEC §3): one compact JSON-RPC 2.0 value per line, UTF-8,
``\\n``-terminated, at most 1 MiB a request. This module builds request frames,
splits the incoming byte stream into lines, and sorts what arrives into replies
(matched by ``id``) and ``event`` notifications (method ``event``, no ``id``), turning
an ``error`` object into the exception class for its ``data.code``.

The session rules (what to register, what was lost) live in :mod:`meshctl._core.session`.

Standard library only (the blocking client imports it): msgspec, when present, only
decodes long replies, and only in a process that has read enough of them to make its
import worth it (:func:`loads_line`).
"""

from __future__ import annotations

from sys import modules as _modules

from meshd.protocol.errors import (
    BadKey,
    FrameTooLarge,
    InvalidParams,
    MeshError,
    MeshProtocolError,
    MeshUnavailable,
    ProfileMismatch,
    error_from_wire,
)
from meshd.protocol.framing import MAX_FRAME, frame_too_large

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any, Final

#: Largest reply line the client accepts; listings can outgrow a request.
MAX_REPLY: Final = 64 << 20
#: The protocol major version this client speaks.
PROTOCOL_MAJOR: Final = "1"

# The json package is not imported on the common path: it loads re (and with it enum,
# functools, collections) and compiles its patterns, together about a third of a
# command's start-up. Its C parts (_json) do the work, built with exactly the arguments
# json would give them; anything unusual goes to json itself, imported then.
# allow_nan=False: NaN and Infinity are not JSON (RFC 8259); Python's json writes them
# by default, and the daemon could only answer such a frame with an error of no id.


def _encode(obj: Any) -> str:
    """``json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    .encode``: what :func:`encode_value` falls back to."""
    import json

    return json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(obj)


def _decode(text: str) -> Any:
    """``json.JSONDecoder().decode``: lines the scanner alone does not take, and errors."""
    import json

    return json.JSONDecoder().decode(text)


def _default(o: Any) -> Any:
    """``JSONEncoder.default``: the same refusal, word for word."""
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


class _ScanContext:
    """What ``json.JSONDecoder()`` hands the C scanner (``json.scanner.make_scanner``)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> float:
        return {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}[name]


def _c_parts() -> tuple[Any, Any]:
    """The C encoder that ``JSONEncoder.encode`` builds anew for every value (about a
    microsecond of each request's few), built once: the same arguments ``iterencode``
    gives it, but no circular-reference markers (a dict shared by threads would see
    another thread's value as a cycle). A cycle then ends in RecursionError from the
    encoder itself, as it did from the refusal's walk of the value before. And the C
    scanner ``JSONDecoder().scan_once`` is. (None, None) when this Python has no
    ``_json`` (json's own classes are used)."""
    try:
        import _json
    except ImportError:  # another Python: json's pure-Python parts
        return None, None
    try:
        encoder = _json.make_encoder(
            None, _default, _json.encode_basestring, None, ":", ",", False, False, False
        )
        scanner = _json.make_scanner(_ScanContext())  # type: ignore[arg-type]
    except (TypeError, AttributeError):  # another Python's signature
        return None, None
    return encoder, scanner


_c_encode, _c_scan = _c_parts()


def _scan(text: str, idx: int) -> tuple[Any, int]:
    """``JSONDecoder().scan_once``: the C scanner, or json's own when there is none."""
    if _c_scan is not None:
        return _c_scan(text, idx)  # type: ignore[no-any-return]
    import json

    return json.JSONDecoder().scan_once(text, idx)  # type: ignore[attr-defined,no-any-return]


def encode_value(obj: Any) -> str:
    """``obj`` as compact JSON text (``_encode``'s result, without its per-call set-up)."""
    if _c_encode is None:
        return _encode(obj)
    return "".join(_c_encode(obj, 0))


def encode(obj: Any) -> bytes:
    """Compact JSON plus the newline: one frame."""
    return (encode_value(obj) + "\n").encode()


def loads(text: str) -> Any:
    """``JSONDecoder().decode(text)`` for one line, the scanner called directly: the common
    line (no leading whitespace, at most the newline after the value) skips the
    decoder's two regex matches; anything else (an error included) goes to the
    decoder itself, so the result or the error is exactly its own."""
    try:
        obj, end = _scan(text, 0)
    except (StopIteration, ValueError):
        return _decode(text)
    rest = len(text) - end
    if rest and (rest > 1 or text[end] != "\n"):
        return _decode(text)
    return obj


class Reply:
    """A response to one of our requests (``id`` is None for parse/invalid-request errors).

    A plain slotted class rather than a dataclass: ``dataclasses`` costs milliseconds
    to import, on the start-up path of every ``meshctl`` command.
    """

    __slots__ = ("error", "id", "result")

    def __init__(
        self, id: int | str | None, result: Any = None, error: MeshError | None = None
    ) -> None:
        self.id = id
        self.result = result
        self.error = error

    def unwrap(self) -> Any:
        """The result, or raise the error the daemon sent."""
        if self.error is not None:
            raise self.error
        return self.result

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Reply):
            return NotImplemented
        return (self.id, self.result, self.error) == (other.id, other.result, other.error)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        return f"Reply(id={self.id!r}, result={self.result!r}, error={self.error!r})"


class Event:
    """A notification the daemon pushed (method ``event``)."""

    __slots__ = ("params",)

    def __init__(self, params: Any) -> None:
        self.params = params

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return bool(self.params == other.params)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Event(params={self.params!r})"


def closed_before_reply(partial: int) -> str:
    """What to say when the daemon closed the connection before the reply was whole.

    Part of a reply received means the daemon was there and dropped this connection
    (it does so to a reader that leaves replies or events unread for too long), not
    that it restarted: say that, and where to look.
    """
    if partial:
        return (
            f"meshd closed the connection in the middle of its reply ({partial} bytes "
            "received): it dropped this connection, as it does when replies or events go "
            "unread for too long (see the daemon's log); the call may have taken effect; "
            "retry"
        )
    return (
        "meshd closed the connection before replying (it may have stopped or restarted; "
        "the call may or may not have taken effect); retry"
    )


#: ``,"method":"…"`` of each method called (a handful; bounded all the same).
_HEADS: dict[str, str] = {}
#: The longest frame line, its newline included, that :func:`check_frame` lets by.
_FRAME_LINE: Final = MAX_FRAME + 1


def _head(method: Any) -> str:
    head = ',"method":' + encode_value(method)
    if method.__class__ is str and len(_HEADS) < 256:
        _HEADS[method] = head
    return head


class Protocol:
    """Request ids, frame building and reply parsing for one connection.

    Feed it bytes with :meth:`feed`; take whole messages with :meth:`next_message`.
    """

    __slots__ = ("_buf", "_next_id")

    def __init__(self) -> None:
        self._next_id = 0
        self._buf = bytearray()

    def request(self, method: str, params: Any = None) -> tuple[int, bytes]:
        """A new request id and its frame; raises FrameTooLarge past 1 MiB.

        The frame is what ``encode({"jsonrpc": "2.0", "id": rid, "method": method,
        "params": params})`` writes (``params`` left out when None), byte for byte, put
        together from the method's cached head and the params' encoding: a heartbeat's
        frame is a third of its client's Python work otherwise."""
        self._next_id += 1
        rid = self._next_id
        head = _HEADS.get(method) if method.__class__ is str else None
        try:
            if head is None:
                head = _head(method)
            if params is None:
                frame = f'{{"jsonrpc":"2.0","id":{rid}{head}}}\n'.encode()
            else:
                body = encode_value(params)
                frame = f'{{"jsonrpc":"2.0","id":{rid}{head},"params":{body}}}\n'.encode()
        except UnicodeEncodeError:
            raise unsendable(method, params) from None
        except ValueError as exc:  # NaN or ±Infinity (allow_nan=False)
            raise not_a_number(method, params, exc) from None
        if len(frame) > _FRAME_LINE:
            check_frame(frame, method)
        return rid, frame

    def feed(self, data: bytes) -> None:
        """Append received bytes."""
        self._buf += data
        if len(self._buf) > MAX_REPLY and b"\n" not in self._buf:
            raise MeshProtocolError(f"the daemon sent a line over {MAX_REPLY} bytes")

    def take(self, data: bytes) -> Reply | Event | None:
        """Feed ``data`` and return the next message; the common case (exactly one whole
        line and nothing buffered) is parsed without copying into the buffer."""
        if not self._buf and data.find(b"\n") == len(data) - 1 and len(data) > 1:
            return parse_line(data)
        self.feed(data)
        return self.next_message()

    @property
    def partial(self) -> int:
        """Bytes of a message received but not yet whole."""
        return len(self._buf)

    def next_message(self) -> Reply | Event | None:
        """The next whole message in the buffer, or None when a line is still incomplete."""
        while True:
            end = self._buf.find(b"\n")
            if end < 0:
                return None
            line = bytes(self._buf[:end])
            del self._buf[: end + 1]
            if line.strip():
                return parse_line(line)

    def clear(self) -> None:
        """Forget buffered bytes (the connection they came from is gone)."""
        self._buf.clear()


#: Request fields that hold resource keys: text in them that is not UTF-8 is refused
#: as ``BAD_KEY``, as the daemon refuses a key that resolves to such a name
#: (:mod:`meshd.keys`); in any other field it is ``INVALID_PARAMS``.
KEY_FIELDS = frozenset({"resources", "resource", "path", "paths"})


def leaves(value: Any, path: str = "$") -> Iterator[tuple[str, Any]]:
    """Every leaf of ``value`` (mapping keys too, at their mapping's path) with the JSON
    path it is at: what :func:`strings` and :func:`numbers` pick from."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield path, str(key)
            yield from leaves(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from leaves(item, f"{path}[{i}]")
    else:
        yield path, value


def strings(value: Any, path: str = "$") -> Iterator[tuple[str, str]]:
    """Every string in ``value`` (mapping keys too) with the JSON path it is at."""
    return ((at, leaf) for at, leaf in leaves(value, path) if isinstance(leaf, str))


def undecodable(text: str) -> bool:
    """Whether ``text`` holds lone surrogates (bytes that were not UTF-8, read with
    ``surrogateescape``): such text cannot be written as JSON, which is UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def key_field(path: str) -> bool:
    """Whether the JSON path ``$.field…`` is under a field of :data:`KEY_FIELDS`."""
    field = path[2:].split(".", 1)[0].split("[", 1)[0] if path.startswith("$.") else ""
    return field in KEY_FIELDS


def unsendable(method: str, params: Any) -> MeshError:
    """The error for params holding text that is not UTF-8 (the JSON encoder's
    UnicodeEncodeError told the caller nothing of the mesh): ``BadKey`` for a resource
    key, as the daemon says of a key that names such a file, else ``InvalidParams``
    with the field's JSON path in ``data.path``, as the daemon says of a bad field."""
    from meshd.protocol.contract import escaped

    for path, text in strings(params):
        if not undecodable(text):
            continue
        shown = escaped(text)
        if key_field(path):
            return BadKey(
                f"bad resource key '{shown}': it is not valid UTF-8 (keys are text); "
                "rename the file, or claim the folder that holds it",
                {"key": shown},
            )
        return InvalidParams(f"{method}: {path} is not valid UTF-8 text: '{shown}'", {"path": path})
    return InvalidParams(f"{method}: the request holds text that is not valid UTF-8")


def not_a_number(method: str, params: Any, exc: ValueError) -> InvalidParams:
    """The error for params holding NaN or ±Infinity, which JSON cannot write: refused
    before sending, as the daemon refuses a bad field (``data.path`` names it)."""
    import math  # only on this refusal's path

    for path, value in numbers(params):
        if not math.isfinite(value):
            shown = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
            return InvalidParams(
                f"{method}: {path} is {shown}, which JSON cannot carry: send a finite number",
                {"path": path},
            )
    return InvalidParams(f"{method}: the request cannot be written as JSON ({exc})")


def numbers(value: Any, path: str = "$") -> Iterator[tuple[str, float]]:
    """Every float in ``value`` with the JSON path it is at."""
    return ((at, leaf) for at, leaf in leaves(value, path) if isinstance(leaf, float))


def check_frame(frame: bytes, method: str) -> None:
    """Refuse a frame the daemon would refuse, before sending a byte of it (``frame``
    ends with its newline, which the limit does not count)."""
    size = len(frame) - 1
    if frame_too_large(size):
        raise FrameTooLarge(
            f"request {method} is {size} bytes, over the 1 MiB frame limit: "
            "send less per call (split the text or the list)",
            {"size": size, "limit": MAX_FRAME},
        )


#: Lines this long or longer (a listing of a few sessions) may go to the compiled
#: decoder; shorter ones always take the standard library's (a heartbeat's reply).
BIG_LINE: Final = 2048
#: Bytes of long lines the standard library decodes before the compiled decoder is
#: imported: ``import msgspec`` costs about what ``json`` spends on that many (15-25
#: ms here), so a one-shot ``meshctl`` never pays for it and a process that keeps
#: reading listings pays at most twice what either choice alone would have cost.
BUY_AFTER: Final = 4 << 20


class _Compiled:
    """The compiled decoder, bought once enough long lines were decoded without it."""

    __slots__ = ("decode", "spent")

    def __init__(self) -> None:
        #: None while not bought yet; False when it cannot be had (no msgspec: the
        #: Hermes plugin's vendored copy runs on the standard library alone).
        self.decode: Any = None
        #: Bytes of long lines the standard library decoded meanwhile.
        self.spent = 0

    def buy(self) -> Any:
        """msgspec's JSON decoder, or False (the standard library serves on)."""
        try:
            import msgspec.json  # optional: see cli.admin.hermes_vendor.OPTIONAL
        except Exception:  # absent, or broken: the standard library is always there
            self.decode = False
        else:
            self.decode = msgspec.json.Decoder().decode
        return self.decode


_compiled = _Compiled()


def loads_line(line: bytes) -> Any:
    """One received line's value: :func:`loads` of its text, exactly (the same value,
    the same error). A long line goes to msgspec's decoder once it is bought (the
    session listing's 6.4 KB: ~2.5x faster): msgspec accepts no line that ``json``
    refuses and gives the same value for every line both accept, but refuses some
    that ``json`` takes (NaN, 1e400, a lone surrogate escape) and words its errors
    its own way, so a line it refuses goes to :func:`loads`, whose answer stands."""
    if len(line) >= BIG_LINE:
        fast = _compiled.decode
        if fast is None:
            _compiled.spent += len(line)
            if _compiled.spent >= BUY_AFTER or "msgspec.json" in _modules:  # (paid for)
                fast = _compiled.buy()
        if fast:
            try:
                return fast(line)
            except Exception:  # json's answer stands, value or error
                pass
    return loads(line.decode())


def parse_line(line: bytes) -> Reply | Event:
    """Turn one received line into a :class:`Reply` or an :class:`Event`."""
    try:
        msg = loads_line(line)
    except (UnicodeDecodeError, ValueError) as exc:
        raise MeshProtocolError(f"the daemon sent a line that is not JSON: {line[:200]!r}") from exc
    if not isinstance(msg, dict):
        raise MeshProtocolError(f"the daemon sent a non-object message: {line[:200]!r}")
    if "id" not in msg:
        if msg.get("method") == "event":
            return Event(msg.get("params"))
        raise MeshProtocolError(f"unexpected notification from the daemon: {line[:200]!r}")
    if "error" in msg:
        return Reply(msg["id"], error=error_from_wire(msg["error"]))
    if "result" not in msg:
        raise MeshProtocolError(f"reply without result or error: {line[:200]!r}")
    return Reply(msg["id"], msg["result"])


#: A request larger than this that the daemon closed the connection on was too large to
#: take (SPEC §3: 1 MiB), not cut off by a restart.
BIG_SEND = 64 << 10


def closed_while_sending(size: int) -> MeshError:
    """Why a ``size``-byte request could not be sent: the daemon closed the connection
    under it, on a new connection too (or at once, for a big one)."""
    if size > BIG_SEND:
        return FrameTooLarge(
            f"meshd closed the connection while a {size}-byte request was being sent; "
            "requests are limited to 1 MiB: send less per call"
        )
    return MeshUnavailable(
        "meshd closed the connection twice in a row; check `meshctl daemon status` "
        "and its log in the state folder"
    )


#: ``data.code`` of the one line a daemon writes to a connection it will not take (too
#: many connections, another uid, no room for partial frames) before closing it.
REFUSALS = frozenset({"UNAVAILABLE", "FORBIDDEN"})


def refused(error: MeshError) -> bool:
    """Whether an error the daemon wrote with a null ``id`` refuses the connection itself."""
    return error.data.get("code") in REFUSALS


def lost_to(error: MeshError) -> MeshError:
    """What every call waiting on a connection fails with when the daemon wrote
    ``error`` with a null ``id`` and closed it: a refusal of the connection as it is
    ("too many connections …", both clients alike), anything else :func:`unreadable`."""
    return error if refused(error) else unreadable(error)


def unreadable(error: MeshError) -> MeshProtocolError:
    """What the calls waiting on a connection are told when the daemon answered one of
    them with an error whose ``id`` is null (JSON-RPC 2.0: it could not read the request
    to find its id -- a parse error, an invalid request, a frame too large): which call
    that answers cannot be told. Given to the oldest waiting call, as it was, a valid
    request of another thread could fail with "Parse error" while the call whose frame
    was unreadable waited for its timeout. So the connection is given up: every call
    waiting on it fails with this, and the next call opens a new one (CONFORMANCE §3)."""
    return MeshProtocolError(
        f"meshd could not read a request sent on this connection ({error.message}), so "
        "which call it answers cannot be told: every call waiting on the connection fails "
        "and it is closed (a new call opens another; the calls may have taken effect)",
        {"daemon_code": error.data.get("code"), "daemon_message": error.message},
    )


def check_protocol(info: Any, where: str) -> None:
    """Refuse a daemon whose protocol major version is not ours, naming both versions."""
    version = str(info.get("protocol_version", "")) if isinstance(info, dict) else ""
    if version.split(".", 1)[0] != PROTOCOL_MAJOR:
        raise MeshProtocolError(
            f"meshd at {where} speaks protocol {version or '(none)'}, this client speaks "
            f"{PROTOCOL_MAJOR}.x: upgrade the older side, then restart the daemon "
            "(meshctl daemon restart)",
            {"daemon_protocol": version, "client_protocol": PROTOCOL_MAJOR},
        )


def check_daemon(info: Any, where: str, profile: str) -> None:
    """What a client checks in ``mesh.info`` on every new connection: the protocol major
    version, and that the daemon serves ``profile`` (``MESH_SOCKET`` names one daemon,
    whatever ``--profile`` says: a mismatch is refused, not silently ignored)."""
    check_protocol(info, where)
    served = info.get("profile") if isinstance(info, dict) else None
    if served is not None and served != profile:
        raise ProfileMismatch(
            f"meshd at {where} serves profile {served!r}, not {profile!r}: MESH_SOCKET (or "
            f"--socket) names one daemon; unset it to reach profile {profile!r} at its own "
            f"socket, or ask for profile {served!r}",
            {"socket": where, "profile": profile, "served": served},
        )


#: SPEC §2's default ``max_query_timeout``: what a daemon that does not say caps waits at.
MAX_QUERY_TIMEOUT: Final = 60.0


def query_cap(info: Any) -> float:
    """The daemon's ``max_query_timeout`` from its ``mesh.info`` (``config``): no wait
    it runs is longer, and a wait not given (``session.resume``'s) is that long."""
    config = info.get("config") if isinstance(info, dict) else None
    cap = config.get("max_query_timeout") if isinstance(config, dict) else None
    if isinstance(cap, bool) or not isinstance(cap, int | float) or cap <= 0:
        return MAX_QUERY_TIMEOUT
    return float(cap)


def daemon_key(info: Any) -> tuple[Any, Any]:
    """What tells one daemon run from the next: its pid and start time."""
    if not isinstance(info, dict):
        return (None, None)
    return (info.get("pid"), info.get("started_at"))
