"""Every event the daemon pushes, as msgspec Structs: one tagged union, ``kind`` the tag.

An event is a JSON-RPC notification with method ``event`` whose params are one of
these (SPEC §3, §6). ``session_id`` names the session the event is about; the
``kind`` tells the shape:

* ``message``, ``answer``, ``handoff``, ``notice``, ``broadcast``: a new inbox item
  (the fields of ``inbox --json``; ack it by ``id``);
* ``query``: a question for the session's live responder (answer it by ``id``);
* ``claim.granted`` (a wait was granted), ``claim.released`` (the session released
  them), ``claim.expired`` (a ttl ran out),
  ``claim.stolen``, ``claim.lost`` (the session ended uncleanly): a claim notice.
  Losses are also durable notices in the holder's inbox (SPEC §5 ``claim.validate``);
  the event then carries that item's ``id`` and ``text``, so a follower that prints
  and acks items treats it as one;
* ``file.changed``: another session changed files in a project this one works in.

The daemon builds exactly these; the clients decode them with the standard-library
mirror in ``meshctl._events`` (a test keeps the two in step, through the real
daemon). Rules as for method structs: new fields get defaults and go at the end.
"""

from __future__ import annotations

from typing import Literal

from msgspec import Struct, field

from meshd.protocol.contract import DAEMON_SENDER

ItemState = Literal["queued", "delivered", "read"]
CLAIM_FRAMING = "claim notice from the mesh daemon (not from the user)"


class EventBody(Struct, kw_only=True, tag_field="kind"):
    """Base of every event: the session it is about."""

    session_id: str


# --- inbox items ---------------------------------------------------------------------


class ItemEvent(EventBody):
    """A new inbox item (the fields of ``meshctl inbox --json``)."""

    id: int
    from_: str = field(name="from")
    text: str
    created_at: str
    state: ItemState
    reply_to: int | None = None
    to: str = ""
    framing: str = ""


class MessageEvent(ItemEvent, tag="message"):
    """A message from another session."""


class AnswerEvent(ItemEvent, tag="answer"):
    """A late answer to an ask."""


class HandoffEvent(ItemEvent, tag="handoff"):
    """A handoff addressed to the session."""


class NoticeEvent(ItemEvent, tag="notice"):
    """A notice from the daemon itself."""


class BroadcastEvent(ItemEvent, tag="broadcast"):
    """A broadcast that reached the session."""


ITEM_EVENTS: dict[str, type[ItemEvent]] = {
    "message": MessageEvent,
    "answer": AnswerEvent,
    "handoff": HandoffEvent,
    "notice": NoticeEvent,
    "broadcast": BroadcastEvent,
}


# --- queries -------------------------------------------------------------------------


class QueryEvent(ItemEvent, tag="query"):
    """A question for the session's live responders (pushed on their channel only)."""

    request: Literal["question", "handoff", "broadcast"] = "question"
    timeout_s: float = 10.0
    chain: list[str] = []


# --- claims --------------------------------------------------------------------------


class ClaimEvent(EventBody):
    """A claim notice: which keys, under which token, what happened and when.

    ``how``: ``ttl``, ``expired``, ``died``, ``steal`` …; ``by``: who took it (a steal);
    ``reason``: the steal's or the wait's reason. ``id``/``text``: the durable inbox
    notice that says the same (losses only; None for a granted wait, whose waiter
    got its reply).
    """

    resources: list[str]
    token: int
    at: str
    how: str = ""
    by: str | None = None
    reason: str = ""
    framing: str = CLAIM_FRAMING
    id: int | None = None
    text: str = ""
    from_: str = field(default=DAEMON_SENDER, name="from")
    created_at: str = ""
    state: ItemState | None = None


class ClaimGrantedEvent(ClaimEvent, tag="claim.granted"):
    """A queued request was granted (the waiter also gets its reply)."""


class ClaimReleasedEvent(ClaimEvent, tag="claim.released"):
    """The session released the claims (``claim.release``, from any of its
    connections); pushed to its subscribers only, never kept in its inbox."""


class ClaimExpiredEvent(ClaimEvent, tag="claim.expired"):
    """The claims' ttl ran out; they are free."""


class ClaimStolenEvent(ClaimEvent, tag="claim.stolen"):
    """Another session stole the claims (``by``, ``reason``)."""


class ClaimLostEvent(ClaimEvent, tag="claim.lost"):
    """The claims went with an unclean end of the session (expired, died)."""


CLAIM_EVENTS: dict[str, type[ClaimEvent]] = {
    "granted": ClaimGrantedEvent,
    "released": ClaimReleasedEvent,
    "expired": ClaimExpiredEvent,
    "stolen": ClaimStolenEvent,
    "lost": ClaimLostEvent,
}

#: The claim notices that mean "this token no longer holds these keys".
ClaimLoss = ClaimExpiredEvent | ClaimStolenEvent | ClaimLostEvent


# --- preemption (SPEC §5b) -----------------------------------------------------------


class PreemptBase(EventBody):
    """A preemption: ``by`` asked the holders of ``resources`` to checkpoint and pause
    within ``grace_s`` (until ``deadline``). ``id``/``text``: the durable inbox notice
    that says the same."""

    preemption_id: int
    by: str
    resources: list[str]
    reason: str = ""
    grace_s: float = 0.0
    deadline: str = ""
    holders: list[str] = []
    framing: str = CLAIM_FRAMING
    id: int | None = None
    text: str = ""
    from_: str = field(default=DAEMON_SENDER, name="from")
    created_at: str = ""
    state: ItemState | None = None


class PreemptEvent(PreemptBase, tag="preempt"):
    """A higher-ranked session asks this one to checkpoint and pause (``meshctl pause``)."""


class PreemptExpiredEvent(PreemptBase, tag="preempt.expired"):
    """This session's preemption ran out of grace; ``holders`` still hold (it may steal)."""


# --- the board -----------------------------------------------------------------------


class FileChangedEvent(EventBody, tag="file.changed"):
    """``from`` changed ``count`` files under ``under`` in ``project`` (coalesced)."""

    from_: str = field(name="from")
    project: str
    count: int
    paths: list[str]
    under: str
    text: str
    at: str
    summary: str = ""
    framing: str = ""


# --- the watch feed (meshctl top) ----------------------------------------------------


class MeshChangedEvent(EventBody, tag="mesh.changed"):
    """Something durable changed in ``what`` (``session``, ``claim``, ``message``,
    ``board``, ``job`` …): sent to ``mesh.watch`` connections, at most four times a
    second, so a viewer re-reads what it shows instead of polling."""

    what: list[str]
    at: str


Event = (
    MessageEvent
    | AnswerEvent
    | HandoffEvent
    | NoticeEvent
    | BroadcastEvent
    | QueryEvent
    | ClaimGrantedEvent
    | ClaimReleasedEvent
    | ClaimExpiredEvent
    | ClaimStolenEvent
    | ClaimLostEvent
    | FileChangedEvent
    | MeshChangedEvent
    | PreemptEvent
    | PreemptExpiredEvent
)

#: Every event class by its ``kind``.
EVENTS: dict[str, type[EventBody]] = {
    **ITEM_EVENTS,
    "query": QueryEvent,
    **{cls.__struct_config__.tag: cls for cls in CLAIM_EVENTS.values()},  # type: ignore[misc]
    "file.changed": FileChangedEvent,
    "mesh.changed": MeshChangedEvent,
    "preempt": PreemptEvent,
    "preempt.expired": PreemptExpiredEvent,
}


def kind_of(event: EventBody) -> str:
    """The ``kind`` tag of an event."""
    return str(event.__struct_config__.tag)
