"""The mailbox's records (SPEC §6): items, handoffs, queries, answers, and their wire shapes.

Plain data and pure helpers shared by :mod:`meshd.core.mail.mailbox` and its parts
(:mod:`meshd.core.mail.items`, :mod:`meshd.core.mail.handoffs`, :mod:`meshd.core.mail.queries`),
the store (:mod:`meshd.store.messages`) and the handlers.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import msgspec

from meshd.protocol.contract import rfc3339
from meshd.protocol.events import ITEM_EVENTS, EventBody, ItemEvent, kind_of
from meshd.protocol.messages import HandoffInfo, InboxItem, ItemKind, ItemState, framing

Write = tuple[Any, ...]
Request = Literal["question", "handoff", "broadcast"]

BUDGET_WINDOW = 60.0  # seconds, sliding (SPEC §2 message_budget_per_minute)
REPLY_WINDOW = 600.0  # replies between two sessions count toward max_reply_depth this long
MAX_FILES = 200
NOT_SENT = "it can no longer be sent to or asked; nothing was sent"  # an ended addressee
HANDOFF_QUESTION = (
    "Please write a handoff: what you did, which files and branch, and the next steps."
)


class Push(NamedTuple):
    """An event for the subscribers of channel ``session_id`` (as ``core.state.Event``)."""

    session_id: str
    body: EventBody

    @property
    def kind(self) -> str:
        return kind_of(self.body)

    @property
    def payload(self) -> dict[str, Any]:
        """The event as it goes on the wire (``kind`` included)."""
        out: dict[str, Any] = msgspec.to_builtins(self.body)
        return out


class Message(msgspec.Struct, gc=False):
    """One inbox item. ``sender`` is set by the daemon; ``depth`` counts a reply chain.

    ``gc=False`` (its fields are plain values): a broadcast to 1,000 sessions makes
    1,000 of them at once, and the collector need not walk any (bench: broadcast).
    """

    id: int
    to: str
    sender: str
    kind: ItemKind
    text: str
    created_at: float
    state: ItemState = "queued"
    reply_to: int | None = None
    depth: int = 1
    delivered_at: float | None = None
    read_at: float | None = None


class Handoff(msgspec.Struct, frozen=True):
    """A durable record of work handed over; ``to`` None means for whoever comes next."""

    id: int
    sender: str
    to: str | None
    summary: str
    files: tuple[str, ...] = ()
    branch: str | None = None
    next_steps: tuple[str, ...] = ()
    created_at: float = 0.0
    by_status: bool = False
    """Written by the daemon's status responder (a requested handoff the session did not
    answer): stored, but never quoted as the session's own last handoff."""


class Query(msgspec.Struct):
    """A pending ask. ``chain``: the sessions it passed through, asker first, target last."""

    id: int
    asker: str
    target: str
    question: str
    request: Request
    chain: tuple[str, ...]
    created_at: float
    created_mono: float
    deadline: float
    close_at: float
    claims: tuple[str, ...] = ()
    answer: str | None = None
    answered_by: Literal["session", "status"] = "session"
    finished: bool = False
    ended: bool = False
    no_responder: bool = False
    """The target's last live responder left before answering (status answer now)."""

    @property
    def over(self) -> bool:
        """Nothing more can come: answered, a party ended, or no responder left."""
        return self.answer is not None or self.ended or self.no_responder


class Answer(msgspec.Struct, frozen=True):
    """The outcome of an ask (SPEC §9 ``sessions ask``)."""

    query_id: int
    answer: str
    answered_by: Literal["session", "status"]
    timed_out: bool
    sender: str
    elapsed_s: float


class Broadcast(msgspec.Struct):
    """What one broadcast did: inbox messages, asks still pending, answers already known."""

    recipients: list[str] = msgspec.field(default_factory=list)
    messages: list[Message] = msgspec.field(default_factory=list)
    pending: list[Query] = msgspec.field(default_factory=list)
    answers: list[Answer] = msgspec.field(default_factory=list)
    skipped: dict[str, str] = msgspec.field(default_factory=dict)
    chain: tuple[str, ...] = ()
    """The chain collected asks extend (the sender's; it travels to other hosts)."""


class MailboxStats(msgspec.Struct, frozen=True):
    unread: int
    pending_queries: int
    responders: int
    subscribers: int


def utf8_len(text: str) -> int:
    return len(text.encode())


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, on a character boundary."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[: limit - 3].decode(errors="ignore") + "..."


def item_of(m: Message) -> InboxItem:
    """The wire shape of an inbox item, framing included."""
    return InboxItem(
        id=m.id, kind=m.kind, from_=m.sender, text=m.text, created_at=rfc3339(m.created_at),
        state=m.state, reply_to=m.reply_to, to=m.to, framing=framing(m.sender),
    )  # fmt: skip


def handoff_info(h: Handoff) -> HandoffInfo:
    """The wire shape of a handoff, framing included."""
    return HandoffInfo(
        id=h.id, from_=h.sender, to=h.to, summary=h.summary, files=list(h.files),
        branch=h.branch, next_steps=list(h.next_steps), created_at=rfc3339(h.created_at),
        framing=framing(h.sender), by_status=h.by_status,
    )  # fmt: skip


def item_event(m: Message) -> ItemEvent:
    """The event that pushes a new item to its addressee's subscribers."""
    return ITEM_EVENTS[m.kind](
        session_id=m.to, id=m.id, from_=m.sender, text=m.text,
        created_at=rfc3339(m.created_at), state=m.state, reply_to=m.reply_to, to=m.to,
        framing=framing(m.sender),
    )  # fmt: skip


def handoff_text(h: Handoff) -> str:
    """A handoff as one readable text (for inbox items and answers)."""
    lines = [h.summary]
    if h.branch:
        lines.append(f"Branch: {h.branch}")
    if h.files:
        lines.append("Files: " + ", ".join(h.files))
    if h.next_steps:
        lines.append("Next steps:")
        lines.extend(f"- {step}" for step in h.next_steps)
    return "\n".join(lines)


def responder_channel(sid: str) -> str:
    """The event channel of ``sid``'s live responders (subscribe a connection to it).

    Queries go only there, so a follower that did not opt in to respond never
    sees one; the payload's ``session_id`` names the session itself.
    """
    return f"respond:{sid}"
