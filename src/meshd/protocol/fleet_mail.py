"""What one meshd sends another through NATS (docs/FLEET.md): the payloads of mail across hosts.

Every payload is a msgspec Struct encoded as JSON. Nothing here touches the network,
and nothing imports nats: the single-host daemon may import this module freely.
"""

from __future__ import annotations

from typing import Literal

import msgspec

MailKind = Literal["message", "handoff", "answer", "notice", "broadcast", "signal"]
AskKind = Literal["question", "handoff", "broadcast"]
ALL = "*all"
"""The mail subject part every host reads (broadcasts and signals); ``*`` is not
allowed in a host name, so no host is called that."""
STREAM_MAX_AGE = 7 * 86400.0
"""Seconds the mail stream keeps an item: how long a host may be away and still get it."""
DUPLICATE_WINDOW = 120.0
"""JetStream drops a second publish with the same Nats-Msg-Id within this many seconds."""


class HandoffBody(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A handoff's fields, carried by its item to the addressee's host, which records
    it too (its ``handoff list`` shows it; SPEC §12). A host that does not know this
    field ignores it and keeps the item's text, as before."""

    summary: str
    files: list[str] = []
    branch: str | None = None
    next_steps: list[str] = []


class MailItem(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One item on the mail stream. ``to`` None: for every host (broadcast, signal).

    ``key`` is the item's id, also its ``Nats-Msg-Id``: JetStream drops a copy within
    its duplicate window, the receiver's seen keys any copy after."""

    key: str = ""
    kind: MailKind
    sender: str
    from_host: str
    created_at: float
    to: str | None = None
    text: str = ""
    depth: int = 1
    path: str | None = None  # a broadcast's --path, canonical
    name: str | None = None  # a signal's name
    payload: str | None = None  # a signal's payload, JSON text
    handoff: HandoffBody | None = None  # a handoff item's record

    def encoded(self, key: str) -> bytes:
        """This item under ``key``, as it goes on the stream."""
        return encode(msgspec.structs.replace(self, key=key))


class AskRequest(msgspec.Struct, kw_only=True):
    """An ask to a session on the host that serves the subject."""

    asker: str
    from_host: str
    to: str
    question: str
    timeout: float
    chain: list[str]
    request: AskKind = "question"


class WireError(msgspec.Struct):
    code: int
    message: str
    data: dict[str, object] = {}


class AskReply(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The outcome of an :class:`AskRequest`: an answer, or the error the host raised."""

    answer: str = ""
    answered_by: Literal["session", "status"] = "status"
    timed_out: bool = False
    sender: str = ""
    elapsed_s: float = 0.0
    query_id: int = 0
    error: WireError | None = None


class CollectRequest(msgspec.Struct, kw_only=True):
    """A collected broadcast, to every other host's sessions (one reply per host)."""

    sender: str
    from_host: str
    text: str
    timeout: float
    chain: list[str]
    path: str | None = None


class CollectReply(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One host's part of a collected broadcast: who got it, their answers, who not."""

    host: str
    recipients: list[str] = []
    answers: list[AskReply] = []
    skipped: dict[str, str] = {}
    error: WireError | None = None


DecodeError = msgspec.DecodeError
encode = msgspec.json.Encoder().encode
decode_mail = msgspec.json.Decoder(MailItem).decode
decode_ask = msgspec.json.Decoder(AskRequest).decode
decode_reply = msgspec.json.Decoder(AskReply).decode
decode_collect = msgspec.json.Decoder(CollectRequest).decode
decode_collected = msgspec.json.Decoder(CollectReply).decode
