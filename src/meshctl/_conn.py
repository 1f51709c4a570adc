"""The wire, without I/O: shared by the blocking and the async client.

What crosses the socket (SPEC §3): one compact JSON-RPC 2.0 value per line, UTF-8,
``\\n``-terminated, at most 1 MiB a request. This module builds request frames,
splits the incoming byte stream into lines, and sorts what arrives into replies
(matched by ``id``) and ``event`` notifications (method ``event``, no ``id``), turning
an ``error`` object into the exception class for its ``data.code``.

It also holds :class:`SessionCore`, the part of a library session that decides what
to send and what to report (register params, "what was lost" after a daemon
restart or an expiry), so both clients say the same thing in the same words.

Standard library only (the blocking client imports it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any, Final

from meshctl import _events
from meshd.protocol.errors import (
    FrameTooLarge,
    MeshError,
    MeshProtocolError,
    ProfileMismatch,
    error_from_wire,
)
from meshd.protocol.framing import MAX_FRAME, frame_too_large

#: Largest reply line the client accepts; listings can outgrow a request.
MAX_REPLY: Final = 64 << 20
#: The protocol major version this client speaks.
PROTOCOL_MAJOR: Final = "1"

_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_decode = json.JSONDecoder().decode


def encode(obj: Any) -> bytes:
    """Compact JSON plus the newline: one frame."""
    return (_encode(obj) + "\n").encode()


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


class Protocol:
    """Request ids, frame building and reply parsing for one connection.

    Feed it bytes with :meth:`feed`; take whole messages with :meth:`next_message`.
    """

    __slots__ = ("_buf", "_next_id")

    def __init__(self) -> None:
        self._next_id = 0
        self._buf = bytearray()

    def request(self, method: str, params: Any = None) -> tuple[int, bytes]:
        """A new request id and its frame; raises FrameTooLarge past 1 MiB."""
        self._next_id += 1
        rid = self._next_id
        obj: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            obj["params"] = params
        frame = encode(obj)
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


def parse_line(line: bytes) -> Reply | Event:
    """Turn one received line into a :class:`Reply` or an :class:`Event`."""
    try:
        msg = _decode(line.decode())
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
    return Reply(msg["id"], result=msg["result"])


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


def daemon_key(info: Any) -> tuple[Any, Any]:
    """What tells one daemon run from the next: its pid and start time."""
    if not isinstance(info, dict):
        return (None, None)
    return (info.get("pid"), info.get("started_at"))


# --- sessions -------------------------------------------------------------------


class SessionCore:
    """The sans-I/O half of a library session: params, claim bookkeeping, and the
    record of what was lost, so both clients decide and say the same thing.

    Claims: :attr:`held` maps each fencing token this client was granted to the keys
    it still holds under it (canonical, as the daemon wrote them); a loss -- a claim
    notice reported by a heartbeat or pushed, or a token that no longer validates
    after the session had to register again -- moves keys to :attr:`lost_keys`.
    :attr:`generation` counts registrations, so two threads that both saw the
    session expire register it again once, not twice.
    """

    def __init__(
        self,
        *,
        task: str,
        session_id: str | None,
        liveness: str,
        bind: bool,
        fields: dict[str, Any],
    ) -> None:
        self.session_id = session_id
        self.params: dict[str, Any] = {
            "task": task,
            "liveness": liveness,
            "pid": os.getpid(),
            "cwd": os.getcwd(),
            **fields,
        }
        if bind:
            self.params["bind"] = True
        self.lost: list[str] = []
        self.daemon: tuple[Any, Any] = (None, None)
        self.interval = 5.0
        self.disabled = False
        self.generation = 0
        self.held: dict[int, set[str]] = {}
        self.lost_keys: dict[int, set[str]] = {}
        #: The newest claim-loss notice id heartbeats reported (``lost_after``).
        self.lost_after = 0

    def register_params(self) -> dict[str, Any]:
        """What ``session.register`` gets; the same id every time once we have one."""
        if self.session_id is None:
            return self.params
        return {"session_id": self.session_id, **self.params}

    def registered(self, result: Any, daemon: tuple[Any, Any], interval: float | None) -> None:
        """Take in a ``session.register`` result."""
        self.session_id = str(result["session_id"])
        self.disabled = bool(result.get("disabled", False))
        self.interval = float(interval or result.get("heartbeat_interval") or 5.0)
        self.daemon = daemon
        self.generation += 1

    def heartbeat_params(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``session.heartbeat`` params: the id plus whatever changed (None = unchanged)."""
        params = {k: v for k, v in fields.items() if v is not None}
        params["session_id"] = self.session_id
        params["lost_after"] = self.lost_after
        return params

    # --- claims ---------------------------------------------------------------------

    def granted(self, token: int | None, resources: Iterable[str]) -> None:
        """This client holds ``resources`` under ``token`` now."""
        if token is not None:
            self.held.setdefault(token, set()).update(resources)

    def released(self, resources: Iterable[str]) -> None:
        """The daemon released ``resources`` (canonical keys) for this session."""
        gone = set(resources)
        for token in list(self.held):
            self.held[token] -= gone
            if not self.held[token]:
                del self.held[token]

    def is_lost(self, token: int | None, resources: Iterable[str]) -> bool:
        """Whether any of ``resources`` under ``token`` is known to be lost."""
        return token is not None and bool(self.lost_keys.get(token, set()) & set(resources))

    def to_validate(self) -> list[tuple[str, int]]:
        """Every (key, token) this client believes it holds, to check after a restart."""
        return sorted((r, t) for t, keys in self.held.items() for r in keys)

    def _lose(self, token: int, resources: Iterable[str]) -> set[str]:
        """Move keys from held to lost; the ones that were held."""
        keys = set(resources) & self.held.get(token, set())
        if keys:
            self.lost_keys.setdefault(token, set()).update(keys)
            self.released(keys)
        return keys

    def take_losses(self, events: Iterable[_events.ClaimEvent]) -> list[str]:
        """Claim-loss notices (from a heartbeat or pushed): one sentence per loss of a
        claim this client held; the cursor moves past every notice seen."""
        out = []
        for e in events:
            if e.id is not None:
                self.lost_after = max(self.lost_after, e.id)
            keys = self._lose(e.token, e.resources)
            if keys:
                out.append(e.text or f"lost {_claim_list([(k, e.token) for k in keys])}")
        return out

    def invalid(self, pairs: Iterable[tuple[str, int]]) -> None:
        """Keys whose tokens the daemon no longer accepts (``claim.validate``)."""
        for key, token in pairs:
            self._lose(token, [key])

    # --- what was lost --------------------------------------------------------------

    def after_restart(
        self, old: tuple[Any, Any], result: Any, lost: list[tuple[str, int]]
    ) -> str | None:
        """What a re-registration after a daemon restart lost (None: nothing)."""
        restored = bool(result.get("refreshed"))
        if restored and not lost:
            return None
        what = (
            "restored the session"
            if restored
            else f"did not know the session; re-registered as {self.session_id}"
        )
        return (
            f"the daemon restarted (pid {old[0]} -> {self.daemon[0]}) and {what}; "
            + _lost_sentence(lost)
        )

    def after_expiry(
        self, exc: MeshError, old: tuple[Any, Any], lost: list[tuple[str, int]]
    ) -> str:
        """What an expired or unknown session lost (``old``: the daemon it had registered with)."""
        what = (
            "expired at the daemon"
            if exc.data_code == "SESSION_EXPIRED"
            else ("was unknown to the daemon")
        )
        message = (
            f"session {self.session_id} {what} ({exc.data_code}: {exc.message}); "
            f"re-registered; {_lost_sentence(lost)}"
        )
        if old != self.daemon:
            message = f"the daemon restarted (pid {old[0]} -> {self.daemon[0]}); {message}"
        return message


def _claim_list(pairs: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{key} (token {token})" for key, token in sorted(pairs))


def _lost_sentence(lost: list[tuple[str, int]]) -> str:
    if not lost:
        return "it held no claims through this client"
    return f"claims it held were released: {_claim_list(lost)}"
