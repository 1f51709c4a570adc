"""The daemon's events, decoded with the standard library: a mirror of ``meshd.protocol.events``.

The daemon builds every pushed event from a msgspec Struct in
``meshd.protocol.events``; the blocking client must not import msgspec, so this
module mirrors those Structs as named tuples, one class per shape and a table
from ``kind`` to class. :func:`decode` turns an event's params into one of them,
refusing a shape that does not match (a missing field, a wrong type) with
``MeshProtocolError``. ``tests/client/test_events.py`` keeps the mirror in step
with the Structs, and decodes every kind the real daemon emits in both clients.

Field names follow the wire, except ``from`` (a keyword), which is ``from_``.
Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from meshd.protocol.contract import DAEMON_SENDER
from meshd.protocol.errors import MeshProtocolError


class ItemEvent(NamedTuple):
    """A new inbox item: ``message``, ``answer``, ``handoff``, ``notice``, ``broadcast``."""

    kind: str
    session_id: str
    id: int
    from_: str
    text: str
    created_at: str
    state: str
    reply_to: int | None = None
    to: str = ""
    framing: str = ""


class QueryEvent(NamedTuple):
    """A question for the session's live responder (``query``)."""

    kind: str
    session_id: str
    id: int
    from_: str
    text: str
    created_at: str
    state: str
    reply_to: int | None = None
    to: str = ""
    framing: str = ""
    request: str = "question"
    timeout_s: float = 10.0
    chain: tuple[str, ...] = ()


class ClaimEvent(NamedTuple):
    """A claim notice: ``claim.granted``, ``claim.released``, ``claim.expired``,
    ``claim.stolen``, ``claim.lost``.

    ``id``/``text``: the durable inbox notice that says the same (losses only).
    """

    kind: str
    session_id: str
    resources: tuple[str, ...]
    token: int
    at: str
    how: str = ""
    by: str | None = None
    reason: str = ""
    framing: str = ""
    id: int | None = None
    text: str = ""
    from_: str = DAEMON_SENDER
    created_at: str = ""
    state: str | None = None

    @property
    def is_loss(self) -> bool:
        """The token no longer holds these keys (expired, stolen, lost)."""
        return self.kind in LOSSES


class FileChangedEvent(NamedTuple):
    """``from_`` changed ``count`` files under ``under`` in ``project`` (``file.changed``)."""

    kind: str
    session_id: str
    from_: str
    project: str
    count: int  # type: ignore[assignment]  # the wire's name; shadows tuple.count
    paths: tuple[str, ...]
    under: str
    text: str
    at: str
    summary: str = ""
    framing: str = ""


class MeshChangedEvent(NamedTuple):
    """Something durable changed in ``what`` (``mesh.changed``; ``mesh.watch`` only)."""

    kind: str
    session_id: str
    what: tuple[str, ...]
    at: str


class PreemptEvent(NamedTuple):
    """``preempt`` (``by`` asks this session to pause within ``grace_s``) and
    ``preempt.expired`` (this session's preemption ran out of grace; ``holders`` still hold)."""

    kind: str
    session_id: str
    preemption_id: int
    by: str
    resources: tuple[str, ...]
    reason: str = ""
    grace_s: float = 0.0
    deadline: str = ""
    holders: tuple[str, ...] = ()
    framing: str = ""
    id: int | None = None
    text: str = ""
    from_: str = DAEMON_SENDER
    created_at: str = ""
    state: str | None = None


Event = ItemEvent | QueryEvent | ClaimEvent | FileChangedEvent | MeshChangedEvent | PreemptEvent

#: The claim notices that mean a token no longer holds its keys.
LOSSES = frozenset({"claim.expired", "claim.stolen", "claim.lost"})

#: Every kind the daemon pushes, and the class it decodes to.
KINDS: dict[str, type[Any]] = {
    **dict.fromkeys(("message", "answer", "handoff", "notice", "broadcast"), ItemEvent),
    "query": QueryEvent,
    **dict.fromkeys(("claim.granted", "claim.released", *sorted(LOSSES)), ClaimEvent),
    "file.changed": FileChangedEvent,
    "mesh.changed": MeshChangedEvent,
    "preempt": PreemptEvent,
    "preempt.expired": PreemptEvent,
}

# What each field must be when present (None allowed where the default is None).
_TYPES: dict[str, type | tuple[type, ...]] = {
    "kind": str,
    "session_id": str,
    "id": int,
    "from_": str,
    "text": str,
    "created_at": str,
    "state": str,
    "reply_to": int,
    "to": str,
    "framing": str,
    "request": str,
    "timeout_s": (int, float),
    "chain": list,
    "resources": list,
    "token": int,
    "at": str,
    "how": str,
    "by": str,
    "reason": str,
    "project": str,
    "count": int,
    "paths": list,
    "under": str,
    "summary": str,
    "what": list,
    "preemption_id": int,
    "grace_s": (int, float),
    "deadline": str,
    "holders": list,
}


def decode(params: Any) -> Event:
    """One event's params as its named tuple; MeshProtocolError if the shape is wrong."""
    if not isinstance(params, Mapping):
        raise MeshProtocolError(f"an event that is not an object: {params!r:.200}")
    kind = params.get("kind")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise MeshProtocolError(f"an event of unknown kind {kind!r}")
    values: dict[str, Any] = {}
    for name in cls._fields:
        wire = "from" if name == "from_" else name
        if wire not in params:
            if name not in cls._field_defaults:
                raise MeshProtocolError(f"a {kind} event without {wire!r}: {params!r:.200}")
            continue
        value = params[wire]
        if value is None and cls._field_defaults.get(name, 0) is None:
            values[name] = None
            continue
        expected = _TYPES[name]
        if not isinstance(value, expected) or isinstance(value, bool):
            raise MeshProtocolError(f"a {kind} event whose {wire!r} is {value!r:.80}")
        values[name] = tuple(value) if isinstance(value, list) else value
    result: Event = cls(**values)
    return result


def claim_losses(events: Any) -> list[ClaimEvent]:
    """The claim losses among raw events (others, and shapes this client does not know,
    are skipped: an older client must not fail on a newer daemon's events)."""
    out = []
    for raw in events:
        if isinstance(raw, Mapping) and raw.get("kind") in LOSSES:
            try:
                event = decode(raw)
            except MeshProtocolError:
                continue
            if isinstance(event, ClaimEvent):
                out.append(event)
    return out
