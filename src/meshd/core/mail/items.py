"""Every session's inbox (SPEC §6): the items, the reply cap and the send budget.

Pure and synchronous. Memory holds each session's unread items (oldest first), a
small index of recent messages (ids, parties, reply depth -- no text) for the reply
cap, and each sender's sliding budget window; read items live in SQLite only.
Writes and pushes go to the :class:`~meshd.core.mail.mailbox.Mailbox`'s ``writes`` and
``events``, and an item for a session on another host to its ``outbound``; a
subscriber of the addressee (:class:`~meshd.core.mail.channels.Channels`) makes a
new item ``delivered`` at once.

States of an item: ``queued`` → ``delivered`` (handed to a reader: an inbox read,
or a push whose frame a subscriber's connection took in full, :meth:`ItemStore.pushed`)
→ ``read`` (only on ack, or an inbox read without ``peek``). Nothing is ever read
before a reader had it, and nothing is ``delivered`` that a reader dropped as too
slow never got: its push event says ``delivered`` (what it is once received), the
item stays ``queued`` until the frame is out.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Sequence
from typing import NamedTuple

from msgspec.structs import replace

from meshd.core.mail.channels import Channels
from meshd.core.mail.parts import MailboxParts
from meshd.core.mail.records import (
    BUDGET_WINDOW,
    NOT_SENT,
    REPLY_WINDOW,
    Message,
    Push,
    Write,
    clip,
    item_event,
    utf8_len,
)
from meshd.protocol.contract import DAEMON_SENDER, rfc3339
from meshd.protocol.errors import BudgetExceeded, MessageRefused, TooLarge
from meshd.protocol.events import BroadcastEvent
from meshd.protocol.messages import ItemKind, ItemState, framing


class _Sent(NamedTuple):
    """What the reply cap needs of a recent message (no text)."""

    sender: str
    to: str
    depth: int
    mono: float


class ItemStore:
    """The unread items of every session, their ids, the reply cap and the budgets."""

    def __init__(self, mb: MailboxParts, channels: Channels) -> None:
        self.mb = mb
        self.channels = channels
        self._inbox: dict[str, dict[int, Message]] = {}
        self._recent: dict[int, _Sent] = {}
        self._recent_order: deque[int] = deque()
        self._sent: dict[str, deque[float]] = {}
        self._next_id = 1

    def restore(self, messages: Iterable[Message], max_message_id: int = 0) -> None:
        """Take back unread items, recent ones (for the reply cap) and the next id."""
        clock = self.mb.clock
        now_m, now_w = clock.monotonic(), clock.now()
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
        self._next_id = max(self._next_id, top + 1)

    def new_id(self) -> int:
        i = self._next_id
        self._next_id += 1
        return i

    def check_body(self, text: str, path: str = "$.text", limit: int | None = None) -> None:
        cap = self.mb.settings.max_body_bytes if limit is None else limit
        size = utf8_len(text)
        if size > cap:
            raise TooLarge(
                f"text is {size} bytes; the limit is {cap}", {"path": path, "limit": cap}
            )

    def send(self, sender: str, to: str, text: str, *, reply_to: int | None = None) -> Message:
        """A durable message from ``sender`` to ``to``.

        Raises :class:`MessageRefused` (target does not accept messages, or the reply
        chain between the two is over ``max_reply_depth``), :class:`BudgetExceeded`,
        :class:`TooLarge`, and the registry's errors for unknown or ended sessions.
        """
        self.mb.registry.get(sender)
        target = self.mb.registry.sessions.get(to)
        if target is None and self.mb.host_of(to) is None:
            self.mb.registry.named(to, NOT_SENT)  # the error for an unknown or ended id
        self.check_body(text)
        if target is not None and not target.accept_messages:
            raise MessageRefused(f"{to} does not accept messages", {"session_id": to})
        depth = self._reply_depth(sender, to, reply_to)
        self.check_budget(sender)
        self.charge(sender)
        return self.put_item(sender, to, "message", text, reply_to=reply_to, depth=depth)

    def notice(self, to: str, text: str, *, push: bool = True) -> Message:
        """A notice from the daemon itself into ``to``'s inbox (no budget, no refusal).

        ``push=False``: the caller pushes an event of its own that carries this item
        (claim notices), so subscribers are not told twice."""
        clipped = clip(text, self.mb.settings.max_body_bytes)
        return self.put_item(DAEMON_SENDER, to, "notice", clipped, push=push)

    def reply_target(self, replier: str, msg_id: int) -> str | None:
        """Who a reply to ``msg_id`` by ``replier`` goes to, if memory still knows it."""
        sent = self._recent.get(msg_id)
        if sent is None:
            m = self._inbox.get(replier, {}).get(msg_id)
            return m.sender if m is not None else None
        if replier not in (sent.sender, sent.to):
            return None  # not its message: the store's answer decides (and refuses)
        return sent.sender if sent.to == replier else sent.to

    def _reply_depth(self, sender: str, to: str, reply_to: int | None) -> int:
        parent = self._recent.get(reply_to) if reply_to is not None else None
        if parent is None or {parent.sender, parent.to} != {sender, to}:
            return 1
        if self.mb.clock.monotonic() - parent.mono > REPLY_WINDOW:
            return 1
        depth = parent.depth + 1
        cap = self.mb.settings.max_reply_depth
        if depth > cap:
            raise MessageRefused(
                f"{sender} and {to} have sent each other {parent.depth} messages in one "
                f"reply chain within 10 minutes (max_reply_depth = {cap}); stop here or ask "
                "the user",
                {"session_id": to, "reason": "max_reply_depth", "limit": cap},
            )
        return depth

    def check_budget(self, sender: str) -> None:
        window = self._sent.get(sender)
        if window is None:
            return
        now = self.mb.clock.monotonic()
        while window and window[0] <= now - BUDGET_WINDOW:
            window.popleft()
        cap = self.mb.settings.message_budget_per_minute
        if len(window) >= cap:
            retry = round(window[0] + BUDGET_WINDOW - now, 3)
            raise BudgetExceeded(
                f"{sender} sent {cap} messages in the last minute "
                f"(message_budget_per_minute); retry in {retry:g} s",
                {"session_id": sender, "limit": cap, "retry_after_s": retry},
            )

    def charge(self, sender: str) -> None:
        self._sent.setdefault(sender, deque()).append(self.mb.clock.monotonic())

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
        now = self.mb.clock.now()
        m = Message(
            id=self.new_id(), to=to, sender=sender, kind=kind, text=text, created_at=now,
            reply_to=reply_to, depth=depth,
        )  # fmt: skip
        if not here and to not in self.mb.registry.sessions:
            host = self.mb.host_of(to)
            if host is not None:
                self._remember(m, self.mb.clock.monotonic())  # the reply cap, across hosts
                self.mb.outbound.append((host, m))
                return m
        self._inbox.setdefault(to, {})[m.id] = m
        self._remember(m, self.mb.clock.monotonic())
        self.mb.writes.append(("message.put", m))
        if push:
            ev = item_event(m)
            if self.channels.subscribers.get(to):
                ev = replace(ev, state="delivered")  # once its frame is out (pushed())
            self.mb.events.append(Push(to, ev))
        return m

    def push_state(self, m: Message) -> ItemState:
        """The state an event that pushes ``m`` says: ``delivered`` when its addressee
        is subscribed (what it is once the frame is out, :meth:`pushed`)."""
        if m.state == "queued" and self.channels.subscribers.get(m.to):
            return "delivered"
        return m.state

    def pushed(self, sid: str, msg_id: int, now: float) -> bool:
        """A subscriber's connection took the whole frame of item ``msg_id``'s push:
        a ``queued`` item becomes ``delivered`` (stored with the next commit).
        Whether it changed."""
        m = self._inbox.get(sid, {}).get(msg_id)
        if m is None or m.state != "queued":
            return False
        m.state, m.delivered_at = "delivered", now
        self.mb.writes.append(("message.state", msg_id, "delivered", now))
        return True

    def put_broadcast(self, sender: str, recipients: Sequence[str], text: str) -> list[Message]:
        """:meth:`put_item` of kind ``broadcast`` to each of ``recipients``, in order.

        The same items and pushes as one :meth:`put_item` each, with what they share
        (the time, the sender's framing, the formatted time, the event's shape) worked
        out once: a broadcast to 1,000 sessions is on the event loop while it runs. The
        records are made the cheapest way each allows (positional items, tuples made
        by ``tuple.__new__``, events copied from one shape): a ``NamedTuple``'s own
        constructor is a Python call and cost as much as the rest of a recipient.
        Their rows go as one write, ``("message.put_many", items)``, which the store
        makes one statement (:func:`meshd.store.messages.write_messages`): the same rows.
        """
        now, mono = self.mb.clock.now(), self.mb.clock.monotonic()
        shape = BroadcastEvent(
            session_id="", id=0, from_=sender, text=text, created_at=rfc3339(now),
            state="queued", reply_to=None, to="", framing=framing(sender),
        )  # fmt: skip
        subscribers, inbox, recent = self.channels.subscribers, self._inbox, self._recent
        order, events, new, like = self._recent_order, self.mb.events, tuple.__new__, replace
        first = self._next_id
        self._next_id = first + len(recipients)
        out = []
        for i, to in enumerate(recipients, first):
            m = Message(i, to, sender, "broadcast", text, now)
            box = inbox.get(to)
            if box is None:
                box = inbox[to] = {}
            box[i] = m
            recent[i] = new(_Sent, (sender, to, 1, mono))
            order.append(i)
            state = "delivered" if subscribers.get(to) else "queued"  # see put_item
            events.append(new(Push, (to, like(shape, session_id=to, id=i, state=state, to=to))))
            out.append(m)
        if out:
            self.mb.writes.append(("message.put_many", tuple(out)))
        return out

    def unread_count(self, sid: str) -> int:
        return len(self._inbox.get(sid, ()))

    def is_unread(self, sid: str, msg_id: int) -> bool:
        return msg_id in self._inbox.get(sid, {})

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
        self.mb.registry.get(sid)
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
        self.mb.registry.get(sid)
        box = self._inbox.get(sid, {})
        now = self.mb.clock.now() if now is None else now
        out = []
        for m in self._chosen(sid, limit, only):
            if m.state == "queued":
                m.state, m.delivered_at = "delivered", now
                if peek and not stored:
                    self.mb.writes.append(("message.state", m.id, "delivered", now))
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
        now = self.mb.clock.now() if now is None else now
        done = []
        for i in ids:
            m = box.get(i)
            if m is not None and m.state == "delivered":
                self._mark_read(box, m, now, stored=stored)
                done.append(i)
        return done

    def discard_many(self, items: Iterable[Message]) -> None:
        """:meth:`discard` of items whose addressee is known: one inbox each, not all."""
        for m in items:
            self._recent.pop(m.id, None)
            box = self._inbox.get(m.to)
            if box is not None:
                box.pop(m.id, None)

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
            self.mb.writes.append(("message.state", m.id, "read", now))
        del box[m.id]

    def sweep(self, now: float) -> None:
        """Forget reply links older than the reply window and idle budget windows."""
        while self._recent_order:
            i = self._recent_order[0]
            sent = self._recent.get(i)
            if sent is not None and now - sent.mono <= REPLY_WINDOW:
                break
            self._recent_order.popleft()
            self._recent.pop(i, None)
        for sender in [k for k, w in self._sent.items() if not w or w[-1] <= now - BUDGET_WINDOW]:
            del self._sent[sender]

    def prune(self, cutoff: float) -> None:
        """Drop ended sessions' unread items created before ``cutoff``."""
        sessions = self.mb.registry.sessions
        for sid in [s for s in self._inbox if s not in sessions]:
            box = self._inbox[sid]
            for i in [i for i, m in box.items() if m.created_at < cutoff]:
                del box[i]
            if not box:
                del self._inbox[sid]

    def unread_total(self) -> int:
        return sum(len(b) for b in self._inbox.values())
