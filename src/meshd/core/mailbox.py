"""Inboxes, their readers and the handoffs (SPEC §6): the pure part.

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
* Items for a session on another host (a fleet, docs/FLEET.md) are not kept here:
  :attr:`Mailbox.host_of` (set by the fleet) names the host of a session this
  daemon does not have, and :meth:`Mailbox.put_item` hands such items to
  :attr:`Mailbox.outbound` for the fleet's outbox instead of an inbox.
* Queries and broadcasts are :class:`~meshd.core.queries.QueryDesk`'s (the
  mailbox's ``desk``; ``ask``, ``answer``, ``finish``, ``broadcast`` and ``wake``
  are reachable from the mailbox too); the records are
  :mod:`meshd.core.mail_records`'s.

States of an item: ``queued`` → ``delivered`` (handed to a reader: an inbox read
or a push to a subscriber) → ``read`` (only on ack, or an inbox read without
``peek``). Nothing is ever read before a reader had it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import NamedTuple

from meshd.core.clock import Clock, SteadyWall
from meshd.core.mail_records import (
    BUDGET_WINDOW,
    HANDOFF_QUESTION,
    MAX_FILES,
    REPLY_WINDOW,
    Answer,
    Broadcast,
    Handoff,
    MailboxStats,
    Message,
    Push,
    Query,
    Request,
    Write,
    clip,
    handoff_text,
    item_event,
    item_of,
    responder_channel,
    utf8_len,
)
from meshd.core.queries import QueryDesk
from meshd.core.registry import Registry
from meshd.core.settings import Settings
from meshd.protocol.contract import DAEMON_SENDER, rfc3339
from meshd.protocol.errors import BudgetExceeded, InvalidParams, MessageRefused, TooLarge
from meshd.protocol.events import BroadcastEvent
from meshd.protocol.messages import ItemKind, framing

__all__ = [  # the records too, so ``from meshd.core.mailbox import Message`` still works
    "BUDGET_WINDOW", "HANDOFF_QUESTION", "MAX_FILES", "REPLY_WINDOW", "Answer", "Broadcast",
    "Handoff", "Mailbox", "MailboxStats", "Message", "Push", "Query", "QueryDesk", "Request",
    "Write", "handoff_text", "item_event", "item_of", "responder_channel",
]  # fmt: skip


class _Sent(NamedTuple):
    """What the reply cap needs of a recent message (no text)."""

    sender: str
    to: str
    depth: int
    mono: float


class Mailbox:
    """Every session's inbox, who reads and answers it, the handoffs; queries are its desk's."""

    def __init__(self, clock: Clock, settings: Settings, registry: Registry) -> None:
        self.clock = clock
        self.steady = SteadyWall(clock)  # ages for pruning: wall-clock steps do not count
        self.settings = settings
        self.registry = registry
        self.writes: list[Write] = []
        self.events: list[Push] = []
        self.desk = QueryDesk(self)
        # The desk's surface, reachable from the mailbox as before the split.
        self.queries: dict[int, Query] = self.desk.queries
        self.ask = self.desk.ask
        self.answer = self.desk.answer
        self.finish = self.desk.finish
        self.broadcast = self.desk.broadcast
        self.status_text = self.desk.status_text
        self._inbox: dict[str, dict[int, Message]] = {}
        self._recent: dict[int, _Sent] = {}
        self._recent_order: deque[int] = deque()
        self._sent: dict[str, deque[float]] = {}
        self._responders: dict[str, set[int]] = {}
        self._subscribers: dict[str, set[int]] = {}
        # The same, by connection: a close costs what it held, not a scan of every session.
        self._responding: dict[int, set[str]] = {}
        self._subscribed: dict[int, set[str]] = {}
        self._handoffs: dict[str, dict[str | None, Handoff]] = {}
        self._next_id = 1
        self._next_handoff = 1
        self.host_of: Callable[[str], str | None] = lambda sid: None
        """The host of ``sid`` when it lives on another host of the fleet (set by it)."""
        self.outbound: list[tuple[str, Message]] = []
        """Items for sessions on other hosts, (host, item): taken by the fleet's outbox
        in the same commit as the rest."""

    @property
    def wake(self) -> Callable[[int], None]:
        """Called with a query id when waiting on it is over early (set by the shell)."""
        return self.desk.wake

    @wake.setter
    def wake(self, fn: Callable[[int], None]) -> None:
        self.desk.wake = fn

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

    def new_id(self) -> int:
        i = self._next_id
        self._next_id += 1
        return i

    def check_body(self, text: str, path: str = "$.text", limit: int | None = None) -> None:
        cap = self.settings.max_body_bytes if limit is None else limit
        size = utf8_len(text)
        if size > cap:
            raise TooLarge(
                f"text is {size} bytes; the limit is {cap}", {"path": path, "limit": cap}
            )

    # --- connections ------------------------------------------------------------------

    def subscribe(self, sid: str, conn_id: int) -> int:
        """Count connection ``conn_id`` as a reader of ``sid``'s pushes; its unread count."""
        self.registry.get(sid)
        self._subscribers.setdefault(sid, set()).add(conn_id)
        self._subscribed.setdefault(conn_id, set()).add(sid)
        return self.unread_count(sid)

    def respond(self, sid: str, conn_id: int) -> None:
        """Make ``conn_id`` a live responder of ``sid`` (until the connection closes)."""
        self.registry.get(sid)
        self._responders.setdefault(sid, set()).add(conn_id)
        self._responding.setdefault(conn_id, set()).add(sid)

    def has_responder(self, sid: str) -> bool:
        return bool(self._responders.get(sid))

    def connection_closed(self, conn_id: int) -> None:
        """Forget a closed connection as subscriber and responder.

        A session left with no live responder has its open questions answered by
        the status responder now (:meth:`QueryDesk.responder_gone`): nobody else was
        given them, so their askers would otherwise wait out the whole timeout.
        """
        for table, mine in (
            (self._subscribers, self._subscribed),
            (self._responders, self._responding),
        ):
            for sid in mine.pop(conn_id, ()):
                conns = table.get(sid)
                if conns is not None:
                    conns.discard(conn_id)
                    if not conns:
                        del table[sid]
                        if table is self._responders:
                            self.desk.responder_gone(sid)

    def session_ended(self, sid: str) -> list[int]:
        """Close the queries to and from ``sid``; forget its responders.

        Returns the ids of queries whose waiters were woken. Its unread items stay
        (durable; shown again if the id registers again, pruned after history_days).
        """
        for table, mine in (
            (self._subscribers, self._subscribed),
            (self._responders, self._responding),
        ):
            for conn_id in table.pop(sid, ()):
                sids = mine.get(conn_id)
                if sids is not None:
                    sids.discard(sid)
                    if not sids:
                        del mine[conn_id]
        return self.desk.session_ended(sid)

    # --- messages -----------------------------------------------------------------------

    def send(self, sender: str, to: str, text: str, *, reply_to: int | None = None) -> Message:
        """A durable message from ``sender`` to ``to``.

        Raises :class:`MessageRefused` (target does not accept messages, or the reply
        chain between the two is over ``max_reply_depth``), :class:`BudgetExceeded`,
        :class:`TooLarge`, and the registry's errors for unknown or ended sessions.
        """
        self.registry.get(sender)
        target = self.registry.sessions.get(to)
        if target is None and self.host_of(to) is None:
            self.registry.get(to)  # the registry's own error for an unknown or ended id
        self.check_body(text)
        if target is not None and not target.accept_messages:
            raise MessageRefused(f"{to} does not accept messages", {"session_id": to})
        depth = self._reply_depth(sender, to, reply_to)
        self.check_budget(sender)
        self.charge(sender)
        return self.put_item(sender, to, "message", text, reply_to=reply_to, depth=depth)

    def has_subscriber(self, sid: str) -> bool:
        """Whether a connection is subscribed to ``sid``'s events right now."""
        return bool(self._subscribers.get(sid))

    def notice(self, to: str, text: str, *, push: bool = True) -> Message:
        """A notice from the daemon itself into ``to``'s inbox (no budget, no refusal).

        ``push=False``: the caller pushes an event of its own that carries this item
        (claim notices), so subscribers are not told twice."""
        clipped = clip(text, self.settings.max_body_bytes)
        return self.put_item(DAEMON_SENDER, to, "notice", clipped, push=push)

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

    def check_budget(self, sender: str) -> None:
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

    def charge(self, sender: str) -> None:
        self._sent.setdefault(sender, deque()).append(self.clock.monotonic())

    def _remember(self, m: Message, mono: float) -> None:
        self._recent[m.id] = _Sent(m.sender, m.to, m.depth, mono)
        self._recent_order.append(m.id)

    def put_item(
        self,
        sender: str,
        to: str,
        kind: ItemKind,
        text: str,
        *,
        reply_to: int | None = None,
        depth: int = 1,
        push: bool = True,
        here: bool = False,
    ) -> Message:
        """Store, index and push one new item; delivered at once if someone is subscribed.

        An item for a session on another host goes to :attr:`outbound` instead (unless
        ``here``: an item that came from the fleet is kept here whoever it names)."""
        now = self.clock.now()
        m = Message(
            id=self.new_id(), to=to, sender=sender, kind=kind, text=text, created_at=now,
            reply_to=reply_to, depth=depth,
        )  # fmt: skip
        if not here and to not in self.registry.sessions:
            host = self.host_of(to)
            if host is not None:
                self._remember(m, self.clock.monotonic())  # the reply cap, across hosts
                self.outbound.append((host, m))
                return m
        if self._subscribers.get(to):
            m.state, m.delivered_at = "delivered", now
        self._inbox.setdefault(to, {})[m.id] = m
        self._remember(m, self.clock.monotonic())
        self.writes.append(("message.put", m))
        if push:
            self.events.append(Push(to, item_event(m)))
        return m

    def put_broadcast(self, sender: str, recipients: Sequence[str], text: str) -> list[Message]:
        """:meth:`put_item` of kind ``broadcast`` to each of ``recipients``, in order.

        The same items, writes and pushes as one :meth:`put_item` each, with what they
        share (the time, the sender's framing, the formatted time) worked out once: a
        broadcast to 1,000 sessions is on the event loop while it runs.
        """
        now, mono = self.clock.now(), self.clock.monotonic()
        created, frame = rfc3339(now), framing(sender)
        subscribers, inbox, recent = self._subscribers, self._inbox, self._recent
        order, writes, events = self._recent_order, self.writes, self.events
        out = []
        for to in recipients:
            m = Message(
                id=self.new_id(), to=to, sender=sender, kind="broadcast", text=text,
                created_at=now,
            )  # fmt: skip
            if subscribers.get(to):
                m.state, m.delivered_at = "delivered", now
            box = inbox.get(to)
            if box is None:
                box = inbox[to] = {}
            box[m.id] = m
            recent[m.id] = _Sent(sender, to, 1, mono)
            order.append(m.id)
            writes.append(("message.put", m))
            event = BroadcastEvent(
                session_id=to, id=m.id, from_=sender, text=text, created_at=created,
                state=m.state, reply_to=None, to=to, framing=frame,
            )  # fmt: skip
            events.append(Push(to, event))
            out.append(m)
        return out

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
        self.check_body(handoff_text(h), "$.summary")
        self._next_handoff += 1
        self._keep_handoff(h)
        self.writes.append(("handoff.put", h))
        if deliver and to is not None and (to in self.registry.sessions or self.host_of(to)):
            text = clip(handoff_text(h), self.settings.max_body_bytes)
            self.put_item(sender, to, "handoff", text)
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
        self.desk.sweep(now)
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
