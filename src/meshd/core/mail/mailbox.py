"""Inboxes, their readers and the handoffs (SPEC §6): the façade of the pure part.

Pure and synchronous: no I/O, no anyio, no sqlite3, no time module. Time comes
from the injected clock (``monotonic()`` for windows and deadlines, ``now()`` for
what is stored and shown). The :class:`Mailbox` composes the parts, each in a
module of its own, and is what the shell drives:

* :class:`~meshd.core.mail.channels.Channels` (``channels``): which connections
  subscribe to and answer for each session;
* :class:`~meshd.core.mail.items.ItemStore` (``items``): the unread items, the
  reply cap and the send budgets (``send``, ``put_item``, ``inbox``, ``ack`` …);
* :class:`~meshd.core.mail.handoffs.HandoffBook` (``handoffs``): each session's latest
  handoffs for the status responder;
* :class:`~meshd.core.mail.queries.QueryDesk` (``desk``): queries and broadcasts;
* the records are :mod:`meshd.core.mail.records`'s.

The parts' methods are reachable from the mailbox too (``mb.send``, ``mb.ask`` …).

* Every durable change is appended to :attr:`Mailbox.writes` as a tuple the store
  maps to SQL (:mod:`meshd.store.messages`): ``("message.put", Message)``,
  ``("message.put_many", items)`` (a broadcast's), ``("message.state", id, state, at)``,
  ``("handoff.put", Handoff)``, ``("message.prune", cutoff)``. Every push is
  appended to :attr:`Mailbox.events` as a :class:`~meshd.core.mail.records.Push` for
  the session's subscribers. :meth:`Mailbox.drain` hands both over; the service
  commits the writes before it replies.
* Memory holds only what is still moving: unread items, pending queries, a small
  index of recent messages for the reply cap, and each session's latest handoffs.
  Read items and history live in SQLite only.
* Items for a session on another host (a fleet, docs/FLEET.md) are not kept here:
  :attr:`Mailbox.host_of` (set by the fleet) names the host of a session this
  daemon does not have, and ``put_item`` hands such items to
  :attr:`Mailbox.outbound` for the fleet's outbox instead of an inbox.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from meshd.core.clock import Clock, SteadyWall
from meshd.core.mail.channels import Channels
from meshd.core.mail.handoffs import HandoffBook
from meshd.core.mail.items import ItemStore
from meshd.core.mail.queries import QueryDesk
from meshd.core.mail.records import Handoff, MailboxStats, Message, Push, Query, Write
from meshd.core.sessions.registry import Registry
from meshd.core.settings import Settings

__all__ = ["Mailbox"]


class Mailbox:
    """Every session's inbox, who reads and answers it, the handoffs; queries are its desk's."""

    def __init__(self, clock: Clock, settings: Settings, registry: Registry) -> None:
        self.clock = clock
        self.steady = SteadyWall(clock)  # ages for pruning: wall-clock steps do not count
        self.settings = settings
        self.registry = registry
        self.writes: list[Write] = []
        self.events: list[Push] = []
        self.host_of: Callable[[str], str | None] = lambda sid: None
        """The host of ``sid`` when it lives on another host of the fleet (set by it)."""
        self.outbound: list[tuple[str, Message]] = []
        """Items for sessions on other hosts, (host, item): taken by the fleet's outbox
        in the same commit as the rest."""
        self.handoffs_out: dict[int, Handoff] = {}
        """The handoff an item of :attr:`outbound` carries, by item id: recorded on the
        addressee's host too, so its ``handoff list`` shows it (SPEC §12)."""
        self.channels = Channels()
        self.items = ItemStore(self, self.channels)
        self.handoffs = HandoffBook(self)
        self.desk = QueryDesk(self)
        # The parts' surface, reachable from the mailbox as before the split.
        items = self.items
        self.has_responder = self.channels.has_responder
        self.has_subscriber = self.channels.has_subscriber
        self.new_id, self.check_body, self.send = items.new_id, items.check_body, items.send
        self.notice, self.reply_target = items.notice, items.reply_target
        self.check_budget, self.charge = items.check_budget, items.charge
        self.put_item, self.put_broadcast = items.put_item, items.put_broadcast
        self.unread_count, self.unread = items.unread_count, items.unread
        self.plan_inbox, self.inbox = items.plan_inbox, items.inbox
        self.ack_writes, self.ack, self.discard = items.ack_writes, items.ack, items.discard
        self.write_handoff = self.handoffs.write_handoff
        self.handoff_for = self.handoffs.handoff_for
        self.discard_handoff = self.handoffs.discard_handoff
        self.queries: dict[int, Query] = self.desk.queries
        self.ask = self.desk.ask
        self.answer = self.desk.answer
        self.finish = self.desk.finish
        self.broadcast = self.desk.broadcast
        self.status_text = self.desk.status_text

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
        self.items.restore(messages, max_message_id)
        self.handoffs.restore(handoffs, max_handoff_id)

    def forget(self, refused: Iterable[Write]) -> None:
        """Writes the disk refused: forget the items and handoffs they created (never
        acknowledged, so never there). State changes are stored first instead."""
        for w in refused:
            if w[0] == "message.put":
                self.items.discard(w[1].id)
            elif w[0] == "message.put_many":
                self.items.discard_many(w[1])
            elif w[0] == "handoff.put":
                self.handoffs.discard_handoff(w[1])

    # --- connections ------------------------------------------------------------------

    def subscribe(self, sid: str, conn_id: int) -> int:
        """Count connection ``conn_id`` as a reader of ``sid``'s pushes; its unread count."""
        self.registry.get(sid)
        self.channels.subscribe(sid, conn_id)
        return self.items.unread_count(sid)

    def respond(self, sid: str, conn_id: int) -> None:
        """Make ``conn_id`` a live responder of ``sid`` (until the connection closes)."""
        self.registry.get(sid)
        self.channels.respond(sid, conn_id)

    def connection_closed(self, conn_id: int) -> None:
        """Forget a closed connection as subscriber and responder.

        A session left with no live responder has its open questions answered by
        the status responder now (:meth:`QueryDesk.responder_gone`): nobody else was
        given them, so their askers would otherwise wait out the whole timeout.
        """
        self.channels.connection_closed(conn_id, self.desk.responder_gone)

    def session_ended(self, sid: str) -> list[int]:
        """Close the queries to and from ``sid``; forget its responders.

        Returns the ids of queries whose waiters were woken. Its unread items stay
        (durable; shown again if the id registers again, pruned after history_days).
        """
        self.channels.session_ended(sid)
        return self.desk.session_ended(sid)

    # --- housekeeping -------------------------------------------------------------------

    def sweep(self) -> None:
        """Forget what no rule needs any more: closed queries, old reply links, budgets.

        A query is closed once late answers are no longer taken; one never finished
        by then was abandoned by its waiter (its connection went away).
        """
        now = self.clock.monotonic()
        self.desk.sweep(now)
        self.items.sweep(now)

    def prune(self) -> float:
        """Drop what history_days allows: ended sessions' old unread items here, and
        (one ``message.prune`` write) read items and ended inboxes in the store."""
        cutoff = self.steady.now() - self.settings.history_days * 86400
        self.items.prune(cutoff)
        self.writes.append(("message.prune", cutoff))
        return cutoff

    def statistics(self) -> MailboxStats:
        responders, subscribers = self.channels.counts()
        return MailboxStats(
            unread=self.items.unread_total(),
            pending_queries=sum(1 for q in self.queries.values() if not q.finished),
            responders=responders,
            subscribers=subscribers,
        )
