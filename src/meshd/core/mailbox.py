"""Inboxes, bounded queries, broadcasts and handoffs (SPEC §6): the pure part.

Pure and synchronous: no I/O, no anyio, no sqlite3, no time module. Time comes
from the injected clock (``monotonic()`` for windows and deadlines, ``now()`` for
what is stored and shown). The shell drives it:

* Every durable change is appended to :attr:`Mailbox.writes` as a tuple the store
  maps to SQL (:mod:`meshd.store.messages`): ``("message.put", Message)``,
  ``("message.state", id, state, at)``, ``("handoff.put", Handoff)``,
  ``("message.prune", cutoff)``. Every push is appended to :attr:`Mailbox.events`
  as a :class:`Push` for the session's subscribers. :meth:`Mailbox.drain` hands
  both over; the service commits the writes before it replies.
* Memory holds only what is still moving: unread items, pending queries, a small
  index of recent messages (ids, parties, reply depth -- no text) for the reply
  cap, and each session's latest handoffs for the status responder. Read items
  and history live in SQLite only.
* An ask either answers at once (no live responder: the status responder) or
  returns a pending :class:`Query`; the shell waits for it and then calls
  :meth:`Mailbox.finish`, which never blocks: the answer if one came, else the
  status answer marked ``timed_out``. :attr:`Mailbox.wake` (set by the shell) is
  called with a query id when waiting on it is over early (answered, or a party
  ended).

States of an item: ``queued`` → ``delivered`` (handed to a reader: an inbox read
or a push to a subscriber) → ``read`` (only on ack, or an inbox read without
``peek``). Nothing is ever read before a reader had it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import msgspec

from meshd.core.clock import Clock, SteadyWall
from meshd.core.registry import Registry, Session
from meshd.core.settings import Settings
from meshd.protocol.contract import DAEMON_SENDER, rfc3339
from meshd.protocol.errors import (
    BudgetExceeded,
    Cycle,
    InvalidParams,
    MessageRefused,
    NotFound,
    QueryRefused,
    TooLarge,
)
from meshd.protocol.events import ITEM_EVENTS, EventBody, ItemEvent, QueryEvent, kind_of
from meshd.protocol.messages import (
    MAX_ANSWER_BYTES,
    MAX_CHAIN_DEPTH,
    InboxItem,
    ItemKind,
    ItemState,
    framing,
)

Write = tuple[Any, ...]
Request = Literal["question", "handoff", "broadcast"]

BUDGET_WINDOW = 60.0  # seconds, sliding (SPEC §2 message_budget_per_minute)
REPLY_WINDOW = 600.0  # replies between two sessions count toward max_reply_depth this long
MAX_FILES = 200
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


@dataclass(slots=True)
class Message:
    """One inbox item. ``sender`` is set by the daemon; ``depth`` counts a reply chain."""

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


@dataclass(frozen=True, slots=True)
class Handoff:
    """A durable record of work handed over; ``to`` None means for whoever comes next."""

    id: int
    sender: str
    to: str | None
    summary: str
    files: tuple[str, ...] = ()
    branch: str | None = None
    next_steps: tuple[str, ...] = ()
    created_at: float = 0.0


@dataclass(slots=True)
class Query:
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
    finished: bool = False
    ended: bool = False


@dataclass(frozen=True, slots=True)
class Answer:
    """The outcome of an ask (SPEC §9 ``sessions ask``)."""

    query_id: int
    answer: str
    answered_by: Literal["session", "status"]
    timed_out: bool
    sender: str
    elapsed_s: float


@dataclass(slots=True)
class Broadcast:
    """What one broadcast did: inbox messages, asks still pending, answers already known."""

    recipients: list[str] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    pending: list[Query] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


class _Sent(NamedTuple):
    """What the reply cap needs of a recent message (no text)."""

    sender: str
    to: str
    depth: int
    mono: float


@dataclass(frozen=True, slots=True)
class MailboxStats:
    unread: int
    pending_queries: int
    responders: int
    subscribers: int


def _utf8_len(text: str) -> int:
    return len(text.encode())


def _clip(text: str, limit: int) -> str:
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


class Mailbox:
    """Every session's inbox, the pending queries and who answers them."""

    def __init__(self, clock: Clock, settings: Settings, registry: Registry) -> None:
        self.clock = clock
        self.steady = SteadyWall(clock)  # ages for pruning: wall-clock steps do not count
        self.settings = settings
        self.registry = registry
        self.writes: list[Write] = []
        self.events: list[Push] = []
        self.wake: Callable[[int], None] = lambda query_id: None
        self.queries: dict[int, Query] = {}
        self._inbox: dict[str, dict[int, Message]] = {}
        self._recent: dict[int, _Sent] = {}
        self._recent_order: deque[int] = deque()
        self._sent: dict[str, deque[float]] = {}
        self._responders: dict[str, set[int]] = {}
        self._subscribers: dict[str, set[int]] = {}
        self._handoffs: dict[str, dict[str | None, Handoff]] = {}
        self._next_id = 1
        self._next_handoff = 1

    # --- plumbing ---------------------------------------------------------------------

    def drain(self) -> tuple[list[Write], list[Push]]:
        """Take the writes and pushes the last calls produced."""
        writes, events = self.writes, self.events
        self.writes, self.events = [], []
        return writes, events

    def restore(
        self,
        messages: Iterable[Message],
        handoffs: Iterable[Handoff],
        *,
        max_message_id: int = 0,
        max_handoff_id: int = 0,
    ) -> None:
        """Take back what the store holds: unread items, recent ones (for the reply cap),
        each session's latest handoffs, and where the id sequences stand."""
        now_m, now_w = self.clock.monotonic(), self.clock.now()
        top = max_message_id
        for m in messages:
            top = max(top, m.id)
            age = max(0.0, now_w - m.created_at)
            if age < REPLY_WINDOW:
                self._remember(m, now_m - age)
            if m.state != "read":
                self._inbox.setdefault(m.to, {})[m.id] = m
        for box in self._inbox.values():  # ids restore in order of the caller's rows
            ordered = sorted(box.items())
            box.clear()
            box.update(ordered)
        top_h = max_handoff_id
        for h in handoffs:
            top_h = max(top_h, h.id)
            self._keep_handoff(h)
        self._next_id = max(self._next_id, top + 1)
        self._next_handoff = max(self._next_handoff, top_h + 1)

    def _new_id(self) -> int:
        i = self._next_id
        self._next_id += 1
        return i

    def _check_body(self, text: str, path: str = "$.text", limit: int | None = None) -> None:
        cap = self.settings.max_body_bytes if limit is None else limit
        size = _utf8_len(text)
        if size > cap:
            raise TooLarge(
                f"text is {size} bytes; the limit is {cap}", {"path": path, "limit": cap}
            )

    # --- connections ------------------------------------------------------------------

    def subscribe(self, sid: str, conn_id: int) -> int:
        """Count connection ``conn_id`` as a reader of ``sid``'s pushes; its unread count."""
        self.registry.get(sid)
        self._subscribers.setdefault(sid, set()).add(conn_id)
        return self.unread_count(sid)

    def respond(self, sid: str, conn_id: int) -> None:
        """Make ``conn_id`` a live responder of ``sid`` (until the connection closes)."""
        self.registry.get(sid)
        self._responders.setdefault(sid, set()).add(conn_id)

    def has_responder(self, sid: str) -> bool:
        return bool(self._responders.get(sid))

    def connection_closed(self, conn_id: int) -> None:
        """Forget a closed connection as subscriber and responder."""
        for table in (self._subscribers, self._responders):
            for sid in [s for s, conns in table.items() if conn_id in conns]:
                table[sid].discard(conn_id)
                if not table[sid]:
                    del table[sid]

    def session_ended(self, sid: str) -> list[int]:
        """Close the queries to and from ``sid``; forget its responders.

        Returns the ids of queries whose waiters were woken. Its unread items stay
        (durable; shown again if the id registers again, pruned after history_days).
        """
        self._responders.pop(sid, None)
        self._subscribers.pop(sid, None)
        woken = []
        for q in list(self.queries.values()):
            if sid in (q.target, q.asker):
                q.ended = True
                if q.finished:
                    del self.queries[q.id]
                else:
                    woken.append(q.id)
                    self.wake(q.id)
        return woken

    # --- messages -----------------------------------------------------------------------

    def send(self, sender: str, to: str, text: str, *, reply_to: int | None = None) -> Message:
        """A durable message from ``sender`` to ``to``.

        Raises :class:`MessageRefused` (target does not accept messages, or the reply
        chain between the two is over ``max_reply_depth``), :class:`BudgetExceeded`,
        :class:`TooLarge`, and the registry's errors for unknown or ended sessions.
        """
        self.registry.get(sender)
        target = self.registry.get(to)
        self._check_body(text)
        if not target.accept_messages:
            raise MessageRefused(f"{to} does not accept messages", {"session_id": to})
        depth = self._reply_depth(sender, to, reply_to)
        self._check_budget(sender)
        self._charge(sender)
        return self._put(sender, to, "message", text, reply_to=reply_to, depth=depth)

    def has_subscriber(self, sid: str) -> bool:
        """Whether a connection is subscribed to ``sid``'s events right now."""
        return bool(self._subscribers.get(sid))

    def notice(self, to: str, text: str, *, push: bool = True) -> Message:
        """A notice from the daemon itself into ``to``'s inbox (no budget, no refusal).

        ``push=False``: the caller pushes an event of its own that carries this item
        (claim notices), so subscribers are not told twice."""
        clipped = _clip(text, self.settings.max_body_bytes)
        return self._put(DAEMON_SENDER, to, "notice", clipped, push=push)

    def reply_target(self, replier: str, msg_id: int) -> str | None:
        """Who a reply to ``msg_id`` by ``replier`` goes to, if memory still knows it."""
        sent = self._recent.get(msg_id)
        if sent is None:
            m = self._inbox.get(replier, {}).get(msg_id)
            return m.sender if m is not None else None
        return sent.sender if sent.to == replier else sent.to

    def _reply_depth(self, sender: str, to: str, reply_to: int | None) -> int:
        parent = self._recent.get(reply_to) if reply_to is not None else None
        if parent is None or {parent.sender, parent.to} != {sender, to}:
            return 1
        if self.clock.monotonic() - parent.mono > REPLY_WINDOW:
            return 1
        depth = parent.depth + 1
        cap = self.settings.max_reply_depth
        if depth > cap:
            raise MessageRefused(
                f"{sender} and {to} have replied to each other {parent.depth} times in 10 "
                f"minutes (max_reply_depth = {cap}); stop here or ask the user",
                {"session_id": to, "reason": "max_reply_depth", "limit": cap},
            )
        return depth

    def _check_budget(self, sender: str) -> None:
        window = self._sent.get(sender)
        if window is None:
            return
        now = self.clock.monotonic()
        while window and window[0] <= now - BUDGET_WINDOW:
            window.popleft()
        cap = self.settings.message_budget_per_minute
        if len(window) >= cap:
            retry = round(window[0] + BUDGET_WINDOW - now, 3)
            raise BudgetExceeded(
                f"{sender} sent {cap} messages in the last minute "
                f"(message_budget_per_minute); retry in {retry:g} s",
                {"session_id": sender, "limit": cap, "retry_after_s": retry},
            )

    def _charge(self, sender: str) -> None:
        self._sent.setdefault(sender, deque()).append(self.clock.monotonic())

    def _remember(self, m: Message, mono: float) -> None:
        self._recent[m.id] = _Sent(m.sender, m.to, m.depth, mono)
        self._recent_order.append(m.id)

    def _put(
        self,
        sender: str,
        to: str,
        kind: ItemKind,
        text: str,
        *,
        reply_to: int | None = None,
        depth: int = 1,
        push: bool = True,
    ) -> Message:
        """Store, index and push one new item; delivered at once if someone is subscribed."""
        now = self.clock.now()
        m = Message(
            id=self._new_id(), to=to, sender=sender, kind=kind, text=text, created_at=now,
            reply_to=reply_to, depth=depth,
        )  # fmt: skip
        if self._subscribers.get(to):
            m.state, m.delivered_at = "delivered", now
        self._inbox.setdefault(to, {})[m.id] = m
        self._remember(m, self.clock.monotonic())
        self.writes.append(("message.put", m))
        if push:
            self.events.append(Push(to, item_event(m)))
        return m

    # --- reading ------------------------------------------------------------------------

    def unread_count(self, sid: str) -> int:
        return len(self._inbox.get(sid, ()))

    def unread(self, sid: str) -> list[Message]:
        """Unread items of ``sid``, oldest first, without changing anything."""
        return list(self._inbox.get(sid, {}).values())

    def _chosen(self, sid: str, limit: int, only: Collection[int] | None) -> list[Message]:
        box = self._inbox.get(sid, {})
        chosen = box.values() if only is None else (box[i] for i in only if i in box)
        return list(chosen)[:limit]

    def plan_inbox(
        self,
        sid: str,
        *,
        peek: bool = False,
        limit: int = 100,
        only: Collection[int] | None = None,
        now: float,
    ) -> tuple[list[int], list[Write]]:
        """The items :meth:`inbox` would hand over, and what it would store; changes
        nothing. The shell stores the writes *first*, then calls ``inbox(only=ids,
        now=now, stored=True)``: a read the disk refused marks nothing read."""
        self.registry.get(sid)
        ids: list[int] = []
        out: list[Write] = []
        for m in self._chosen(sid, limit, only):
            ids.append(m.id)
            if not peek:
                out.append(("message.state", m.id, "read", now))
            elif m.state == "queued":
                out.append(("message.state", m.id, "delivered", now))
        return ids, out

    def inbox(
        self,
        sid: str,
        *,
        peek: bool = False,
        limit: int = 100,
        only: Collection[int] | None = None,
        now: float | None = None,
        stored: bool = False,
    ) -> list[Message]:
        """Hand ``sid``'s unread items (oldest first) to a reader.

        They become ``delivered``; without ``peek`` they are also ``read`` and leave
        memory (the text lives on in SQLite). ``only``: just these ids (the ones a
        history page shows). Returned items show their new state. ``stored``: the
        shell stored :meth:`plan_inbox`'s writes already, so none are recorded.
        """
        self.registry.get(sid)
        box = self._inbox.get(sid, {})
        now = self.clock.now() if now is None else now
        out = []
        for m in self._chosen(sid, limit, only):
            if m.state == "queued":
                m.state, m.delivered_at = "delivered", now
                if peek and not stored:
                    self.writes.append(("message.state", m.id, "delivered", now))
            if not peek:
                self._mark_read(box, m, now, stored=stored)
            out.append(m)
        return out

    def ack_writes(self, sid: str, ids: Sequence[int], *, now: float) -> list[Write]:
        """What :meth:`ack` would store; changes nothing (store first, then apply)."""
        box = self._inbox.get(sid, {})
        return [
            ("message.state", i, "read", now)
            for i in dict.fromkeys(ids)
            if (m := box.get(i)) is not None and m.state == "delivered"
        ]

    def ack(
        self, sid: str, ids: Sequence[int], *, now: float | None = None, stored: bool = False
    ) -> list[int]:
        """Mark delivered items read; returns the ids that changed (idempotent).

        An item still ``queued`` was never handed to a reader, so it is not acked.
        """
        box = self._inbox.get(sid, {})
        now = self.clock.now() if now is None else now
        done = []
        for i in ids:
            m = box.get(i)
            if m is not None and m.state == "delivered":
                self._mark_read(box, m, now, stored=stored)
                done.append(i)
        return done

    def discard(self, msg_id: int) -> None:
        """Forget a new item whose storage failed: it was never acknowledged."""
        self._recent.pop(msg_id, None)
        for box in self._inbox.values():
            if box.pop(msg_id, None) is not None:
                return

    def _mark_read(
        self, box: dict[int, Message], m: Message, now: float, *, stored: bool = False
    ) -> None:
        m.state, m.read_at = "read", now
        if not stored:
            self.writes.append(("message.state", m.id, "read", now))
        del box[m.id]

    def forget(self, refused: Iterable[Write]) -> None:
        """Writes the disk refused: forget the items and handoffs they created (never
        acknowledged, so never there). State changes are stored first instead."""
        for w in refused:
            if w[0] == "message.put":
                self.discard(w[1].id)
            elif w[0] == "handoff.put":
                self.discard_handoff(w[1])

    def discard_handoff(self, h: Handoff) -> None:
        """Forget a new handoff whose storage failed (the status responder must not
        quote it): the previous one of the same sender and addressee comes back only
        after a restart, so until then none is quoted."""
        mine = self._handoffs.get(h.sender, {})
        if mine.get(h.to) is h:
            del mine[h.to]

    # --- queries ------------------------------------------------------------------------

    def ask(
        self,
        asker: str,
        to: str,
        question: str,
        *,
        timeout: float,
        claims: Sequence[str] = (),
        request: Request = "question",
    ) -> Answer | Query:
        """Ask ``to`` a bounded question.

        With no live responder the status responder answers at once (an
        :class:`Answer`). Otherwise a pending :class:`Query` is pushed to the
        responders (a ``query`` event on :func:`responder_channel`); wait at most
        ``query.deadline`` then call :meth:`finish`. ``claims``: the target's claims,
        for the status answer. Raises :class:`QueryRefused`, :class:`Cycle`,
        :class:`BudgetExceeded`, :class:`TooLarge`.
        """
        self.registry.get(asker)
        target = self.registry.get(to)
        self._check_body(question, "$.question")
        if not target.accept_queries:
            raise QueryRefused(f"{to} does not accept queries", {"session_id": to})
        chain = self._chain(asker, to)
        self._check_budget(asker)
        self._charge(asker)
        if not self.has_responder(to):
            return self._status_answer(
                0, target, asker, claims=claims, timed_out=False, elapsed=0.0
            )
        return self._open_query(
            asker, to, question, chain=chain, timeout=timeout, claims=claims, request=request
        )

    def _chain(self, asker: str, to: str) -> tuple[str, ...]:
        """The chain a new ask from ``asker`` extends (SPEC §6 Cycles), target appended."""
        bases = [q.chain for q in self._open_queries() if q.target == asker] or [(asker,)]
        for base in bases:
            if to in base:
                raise Cycle(
                    f"asking {to} would come back to it: {' -> '.join((*base, to))}",
                    {"chain": [*base, to]},
                )
        chain = (*max(bases, key=len), to)
        if len(chain) - 1 > MAX_CHAIN_DEPTH:
            raise Cycle(
                f"asking {to} would make a chain {len(chain) - 1} deep "
                f"(the limit is {MAX_CHAIN_DEPTH}): {' -> '.join(chain)}",
                {"chain": list(chain), "limit": MAX_CHAIN_DEPTH},
            )
        return chain

    def _open_queries(self) -> Iterable[Query]:
        now = self.clock.monotonic()
        return (
            q
            for q in self.queries.values()
            if q.answer is None and not q.ended and now < q.close_at
        )

    def _open_query(
        self,
        asker: str,
        to: str,
        question: str,
        *,
        chain: tuple[str, ...],
        timeout: float,
        claims: Sequence[str],
        request: Request,
    ) -> Query:
        timeout = min(timeout, self.settings.max_query_timeout)
        now_m, now_w = self.clock.monotonic(), self.clock.now()
        q = Query(
            id=self._new_id(), asker=asker, target=to, question=question, request=request,
            chain=chain, created_at=now_w, created_mono=now_m, deadline=now_m + timeout,
            close_at=now_m + timeout + self.settings.max_query_timeout, claims=tuple(claims),
        )  # fmt: skip
        self.queries[q.id] = q
        event = QueryEvent(
            session_id=to, id=q.id, from_=asker, text=question, created_at=rfc3339(now_w),
            state="delivered", to=to, framing=framing(asker), request=request, timeout_s=timeout,
            chain=list(chain),
        )  # fmt: skip
        # The channel is the responders'; the event is about ``to``.
        self.events.append(Push(responder_channel(to), event))
        return q

    def answer(self, sid: str, query_id: int, text: str) -> Message | None:
        """``sid`` answers its query ``query_id``.

        In time (its ask still waits): ``None``, and the waiter is woken. Late: the
        answer goes to the asker's inbox as kind ``answer`` (returned). Raises
        :class:`NotFound` for a query that is not ``sid``'s, answered or forgotten.
        """
        self._check_body(text, limit=min(MAX_ANSWER_BYTES, self.settings.max_body_bytes))
        q = self.queries.get(query_id)
        if q is None or q.target != sid or q.answer is not None:
            raise NotFound(
                f"no open query {query_id} for {sid} (answered already, or too late)",
                {"query_id": query_id},
            )
        q.answer = text
        if not q.finished:
            self.wake(q.id)
            return None
        del self.queries[q.id]
        return self._put(sid, q.asker, "answer", text, reply_to=q.id)

    def finish(self, query_id: int) -> Answer:
        """The outcome of a pending ask, now: its answer, or the status answer."""
        q = self.queries.get(query_id)
        if q is None or q.finished:
            raise NotFound(f"no pending query {query_id}", {"query_id": query_id})
        q.finished = True
        elapsed = round(self.clock.monotonic() - q.created_mono, 3)
        if q.answer is not None or q.ended:
            del self.queries[q.id]
        if q.answer is not None:
            return Answer(q.id, q.answer, "session", False, q.target, elapsed)
        target = self.registry.sessions.get(q.target)
        timed_out = not q.ended
        return self._status_answer(
            q.id,
            target,
            q.asker,
            claims=q.claims,
            timed_out=timed_out,
            elapsed=elapsed,
            sid=q.target,
        )

    def _status_answer(
        self,
        query_id: int,
        target: Session | None,
        asker: str,
        *,
        claims: Sequence[str],
        timed_out: bool,
        elapsed: float,
        sid: str = "",
    ) -> Answer:
        sid = target.session_id if target is not None else sid
        text = self.status_text(sid, asker, claims)
        return Answer(query_id, text, "status", timed_out, sid, elapsed)

    def status_text(self, sid: str, asker: str, claims: Sequence[str] = ()) -> str:
        """What the status responder says of ``sid`` to ``asker``, from what it reported."""
        s = self.registry.sessions.get(sid)
        if s is None:
            return f"{sid} has ended."
        head = f"{sid} is {s.status}" + (f": {s.task}" if s.task else "")
        where = [f"in {s.cwd}"] if s.cwd else []
        if s.branch:
            where.append(f"on branch {s.branch}")
        parts = [head + (f" ({', '.join(where)})" if where else "") + "."]
        ago = max(0, round(self.clock.now() - s.last_heartbeat))
        parts.append(f"Last heard from {ago} s ago.")
        if claims:
            parts.append("Holds " + ", ".join(claims) + ".")
        h = self.handoff_for(sid, asker)
        if h is not None:
            parts.append(f"Last handoff (#{h.id}): {handoff_text(h)}")
        parts.append("(Answered by the mesh from what the session reported.)")
        return _clip(" ".join(parts), MAX_ANSWER_BYTES)

    # --- broadcasts ---------------------------------------------------------------------

    def broadcast(
        self,
        sender: str,
        text: str,
        *,
        select: Callable[[Session], bool] | None = None,
        collect: bool = False,
        timeout: float = 10.0,
        claims_of: Callable[[str], Sequence[str]] = lambda sid: (),
    ) -> Broadcast:
        """Send ``text`` to every live session but the sender (``select`` narrows it).

        Counts once against the budget. Sessions refusing messages are skipped, and
        with ``collect`` those refusing queries or in the sender's chain too. With
        ``collect`` a session with a live responder is asked (pending in
        ``pending``); the others get the message and a status answer.
        """
        self.registry.get(sender)
        self._check_body(text)
        self._check_budget(sender)
        out = Broadcast()
        bases = [q.chain for q in self._open_queries() if q.target == sender] or [(sender,)]
        base = max(bases, key=len)
        if collect and len(base) > MAX_CHAIN_DEPTH:
            raise Cycle(
                f"{sender} is answering a query {len(base) - 1} deep; a collected broadcast "
                f"would go deeper than {MAX_CHAIN_DEPTH}",
                {"chain": list(base), "limit": MAX_CHAIN_DEPTH},
            )
        self._charge(sender)
        for s in list(self.registry.sessions.values()):
            sid = s.session_id
            if sid == sender or (select is not None and not select(s)):
                continue
            why = self._broadcast_refusal(s, collect, bases)
            if why:
                out.skipped[sid] = why
                continue
            out.recipients.append(sid)
            if collect and self.has_responder(sid):
                q = self._open_query(
                    sender, sid, text, chain=(*base, sid), timeout=timeout,
                    claims=claims_of(sid), request="broadcast",
                )  # fmt: skip
                out.pending.append(q)
                continue
            out.messages.append(self._put(sender, sid, "broadcast", text))
            if collect:
                out.answers.append(
                    self._status_answer(
                        0, s, sender, claims=claims_of(sid), timed_out=False, elapsed=0.0
                    )
                )
        return out

    @staticmethod
    def _broadcast_refusal(s: Session, collect: bool, bases: list[tuple[str, ...]]) -> str:
        if not s.accept_messages:
            return "does not accept messages"
        if collect and not s.accept_queries:
            return "does not accept queries"
        if collect and any(s.session_id in b for b in bases):
            return "already in this query chain"
        return ""

    # --- handoffs -----------------------------------------------------------------------

    def write_handoff(
        self,
        sender: str,
        summary: str,
        *,
        to: str | None = None,
        files: Sequence[str] = (),
        branch: str | None = None,
        next_steps: Sequence[str] = (),
        require_live: bool = True,
        deliver: bool = True,
    ) -> Handoff:
        """A durable handoff; one addressed to a live session also lands in its inbox.

        ``require_live=False`` stores one for a sender that may just have ended (a
        requested handoff, answered by the status responder); ``deliver=False``
        skips the inbox item (the requester gets the handoff in its reply).
        """
        if require_live:
            self.registry.get(sender)
        if len(files) > MAX_FILES:
            raise TooLarge(
                f"{len(files)} files; the limit is {MAX_FILES}",
                {"path": "$.files", "limit": MAX_FILES},
            )
        if to == sender:
            raise InvalidParams("a handoff to oneself is a note", {"path": "$.to"})
        h = Handoff(
            id=self._next_handoff, sender=sender, to=to, summary=summary, files=tuple(files),
            branch=branch, next_steps=tuple(next_steps), created_at=self.clock.now(),
        )  # fmt: skip
        self._check_body(handoff_text(h), "$.summary")
        self._next_handoff += 1
        self._keep_handoff(h)
        self.writes.append(("handoff.put", h))
        if deliver and to is not None and to in self.registry.sessions:
            self._put(sender, to, "handoff", _clip(handoff_text(h), self.settings.max_body_bytes))
        return h

    def _keep_handoff(self, h: Handoff) -> None:
        mine = self._handoffs.setdefault(h.sender, {})
        old = mine.get(h.to)
        if old is None or old.id < h.id:
            mine[h.to] = h

    def handoff_for(self, sid: str, asker: str) -> Handoff | None:
        """``sid``'s latest handoff that ``asker`` may see: unaddressed, or addressed to it."""
        mine = self._handoffs.get(sid, {})
        seen = [h for h in (mine.get(None), mine.get(asker)) if h is not None]
        return max(seen, key=lambda h: h.id) if seen else None

    # --- housekeeping -------------------------------------------------------------------

    def sweep(self) -> None:
        """Forget what no rule needs any more: closed queries, old reply links, budgets.

        A query is closed once late answers are no longer taken; one never finished
        by then was abandoned by its waiter (its connection went away).
        """
        now = self.clock.monotonic()
        for q in [q for q in self.queries.values() if now >= q.close_at]:
            del self.queries[q.id]
        while self._recent_order:
            i = self._recent_order[0]
            sent = self._recent.get(i)
            if sent is not None and now - sent.mono <= REPLY_WINDOW:
                break
            self._recent_order.popleft()
            self._recent.pop(i, None)
        for sender in [k for k, w in self._sent.items() if not w or w[-1] <= now - BUDGET_WINDOW]:
            del self._sent[sender]

    def prune(self) -> float:
        """Drop what history_days allows: ended sessions' old unread items here, and
        (one ``message.prune`` write) read items and ended inboxes in the store."""
        cutoff = self.steady.now() - self.settings.history_days * 86400
        for sid in [s for s in self._inbox if s not in self.registry.sessions]:
            box = self._inbox[sid]
            for i in [i for i, m in box.items() if m.created_at < cutoff]:
                del box[i]
            if not box:
                del self._inbox[sid]
        self.writes.append(("message.prune", cutoff))
        return cutoff

    def statistics(self) -> MailboxStats:
        return MailboxStats(
            unread=sum(len(b) for b in self._inbox.values()),
            pending_queries=sum(1 for q in self.queries.values() if not q.finished),
            responders=sum(len(c) for c in self._responders.values()),
            subscribers=sum(len(c) for c in self._subscribers.values()),
        )


def responder_channel(sid: str) -> str:
    """The event channel of ``sid``'s live responders (subscribe a connection to it).

    Queries go only there, so a follower that did not opt in to respond never
    sees one; the payload's ``session_id`` names the session itself.
    """
    return f"respond:{sid}"
