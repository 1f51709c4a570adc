"""``message.*``, ``query.*``, ``broadcast.send``, ``handoff.*``, ``events.subscribe`` (SPEC §6).

The rules live in :mod:`meshd.core.mail.mailbox`; this module waits and stores:

* Asks (``query.ask``, ``handoff.request``, collected broadcasts) are concurrent
  handlers. A query goes as an ``event`` of kind ``query`` to the connections
  that called ``query.respond`` for the target (the responder channel), and the
  ask waits for ``query.answer`` at most its timeout (a timer on the loop),
  then takes the status answer: an ask never hangs past its timeout. A local
  ``query.ask`` waits as a record (:class:`_Ask`, a
  :class:`~meshd.protocol.jsonrpc.Later`), not a task: the ``query.answer`` that
  answers it writes the asker's reply before its own.
* A responder or subscriber counts until its connection closes
  (:meth:`MessageHandlers.connection_closed`).
* History (``inbox --all``, handoff list/show, sent states) is read from SQLite on
  the store's read connection (:meth:`meshd.store.Store.read`): WAL lets it read
  while the store's writer writes.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar, cast

import anyio

from meshd.core.mail.records import (
    HANDOFF_QUESTION,
    Answer,
    Message,
    Query,
    handoff_info,
    item_of,
    responder_channel,
)
from meshd.core.sessions.registry import Session
from meshd.domain import Domain
from meshd.domains.fleet_mail import FleetMail, answer_of
from meshd.keys import Key, canonical_key, from_canonical, path_key
from meshd.protocol import fleet_mail as wire
from meshd.protocol import messages as mm
from meshd.protocol.contract import DAEMON_SENDER, rfc3339
from meshd.protocol.errors import (
    InvalidParams,
    MeshDisabled,
    MeshError,
    MessageRefused,
    NotFound,
    StorageUnavailable,
)
from meshd.protocol.jsonrpc import Later
from meshd.protocol.methods import SessionInfo
from meshd.service import Conn, Service
from meshd.store import messages as sm

T = TypeVar("T")


class _Wait:
    """One :meth:`MessageHandlers.wait_answers`: the queries it still waits for."""

    __slots__ = ("future", "pending")

    def __init__(self, pending: set[int], future: asyncio.Future[None]) -> None:
        self.pending = pending
        self.future = future


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Ask(Later):
    """One local ``query.ask`` waiting for its answer: a record and a timer, no task.

    Answered (:meth:`finish`) when the core wakes its query (answered, or a party
    ended) or at its deadline; withdrawn when the asker's connection closes first
    (the query then stays with the desk until swept, as a cancelled wait left it).
    A task per ask cost a spawn, a reader task to take over the connection, and a
    pass of the loop to resume it: about a fifth of the daemon's CPU per ask.
    """

    __slots__ = ("owner", "query_id", "timer")

    def __init__(self, owner: MessageHandlers, query_id: int) -> None:
        super().__init__()
        self.owner = owner
        self.query_id = query_id
        self.timer: asyncio.TimerHandle | None = None

    def finish(self) -> None:
        """The outcome now: its answer, or the status answer (timed out, or ended)."""
        if self.done:
            return
        self.owner._asks.pop(self.query_id, None)
        if self.timer is not None:
            self.timer.cancel()
        try:
            self.settle(ask_result(self.owner.mb.finish(self.query_id)))
        except MeshError as exc:
            self.settle(error=exc)

    def withdraw(self) -> None:
        self.owner._asks.pop(self.query_id, None)
        if self.timer is not None:
            self.timer.cancel()


class MessageHandlers(Domain):
    name = "messages"

    def __init__(self, svc: Service, *, fleet: FleetMail) -> None:
        super().__init__(svc)
        self.mb = svc.state.mailbox
        self.mb.wake = self._wake
        self._waits: dict[int, _Wait] = {}
        """The wait of each query an ask waits for (one wait per query: its asker's)."""
        self._asks: dict[int, _Ask] = {}
        """The local ``query.ask`` records waiting, by query id."""
        self._answered: list[_Ask] | None = None
        """While :meth:`answer` runs: the asks its answer woke, answered right after."""
        self.fleet = fleet
        """Mail to and from other hosts (the fleet's outbox; routes nothing while alone)."""

    def install(self) -> None:
        svc = self.svc
        svc.add(mm.SEND, self.send, is_async=True)
        svc.add(mm.INBOX, self.inbox, is_async=True)
        svc.add(mm.ACK, self.ack, is_async=True)
        svc.add(mm.STATUS, self.status, is_async=True)
        svc.add(mm.ASK, self.ask, is_async=True, concurrent=True)
        svc.add(mm.ANSWER, self.answer, is_async=True)
        svc.add(mm.RESPOND, self.respond)
        svc.add(mm.BROADCAST, self.broadcast, is_async=True, concurrent=True)
        svc.add(mm.HANDOFF_WRITE, self.handoff_write, is_async=True)
        svc.add(mm.HANDOFF_REQUEST, self.handoff_request, is_async=True, concurrent=True)
        svc.add(mm.HANDOFF_LIST, self.handoff_list, is_async=True)
        svc.add(mm.HANDOFF_SHOW, self.handoff_show, is_async=True)
        svc.add(mm.SUBSCRIBE, self.subscribe)

    # --- domain hooks -------------------------------------------------------------------

    def restore(self, db: sqlite3.Connection) -> None:
        """Unread items, recent messages and the latest handoffs come back (after sessions)."""
        mail = sm.restore(db, self.svc.clock.now())
        self.mb.restore(
            mail.messages, mail.handoffs,
            max_message_id=mail.max_message_id, max_handoff_id=mail.max_handoff_id,
        )  # fmt: skip

    def sweep(self) -> None:
        self.mb.sweep()

    def prune(self, history_days: float) -> None:
        self.mb.prune()  # reads history_days from its settings (reloads included)

    def connection_closed(self, conn: Conn) -> None:
        self.mb.connection_closed(conn.id)

    # --- plumbing -----------------------------------------------------------------------

    async def commit(self) -> None:
        """Store what the mailbox wrote before the reply: the service drains it with the
        rest of the state (``MeshState.drain``). If the disk refuses it,
        :meth:`Service.commit` forgets what it created (new items, a new handoff:
        ``MeshState.forget``): nothing refused takes effect. Marking items read is
        stored *before* it is applied instead (:meth:`inbox`, :meth:`ack`).
        """
        await self.svc.commit()

    def _enabled(self) -> None:
        if not self.svc.state.settings.enabled:
            raise MeshDisabled("the mesh is disabled in config (enabled = false)")

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a blocking read helper on the store's read connection, in a worker thread."""
        return await self.svc.store.read(fn)

    def claims_of(self, sid: str) -> list[str]:
        return [c.resource for c in self.svc.state.claims.list_claims(sid)]

    def _wake(self, query_id: int) -> None:
        """The core's word that waiting on ``query_id`` is over (called inside the core).

        An ask woken by ``query.answer`` is answered as soon as the core is done (its
        reply written before the responder's); one woken otherwise (a party ended) in
        the next pass of the loop, as a waiting task would have been.
        """
        ask = self._asks.pop(query_id, None)
        if ask is not None:
            if self._answered is not None:
                self._answered.append(ask)
            else:
                asyncio.get_running_loop().call_soon(ask.finish)
            return
        w = self._waits.pop(query_id, None)
        if w is not None:
            w.pending.discard(query_id)
            if not w.pending:
                _settle(w.future)

    async def wait_answers(self, queries: list[Query]) -> list[Answer]:
        """Wait until every query is answered (or its party ended) or the first deadline.

        A plain future and a timer, not anyio's Event and ``move_on_after``: each ask
        waits once, and the cancel scope and the event took about as long as the rest of
        the wait's own work (bench: query.ask). Cancelling the task (its connection
        closed) cancels the await as before; the timer and the waits go either way.
        """
        pending = {q.id for q in queries if not q.over}
        if pending:
            loop = asyncio.get_running_loop()
            w = _Wait(set(pending), loop.create_future())
            for qid in pending:
                self._waits[qid] = w
            deadline = min(q.deadline for q in queries)
            left = max(0.0, deadline - self.svc.clock.monotonic())
            timer = loop.call_later(left, _settle, w.future)
            try:
                await w.future
            finally:
                timer.cancel()
                for qid in pending:
                    self._waits.pop(qid, None)
        return [self.mb.finish(q.id) for q in queries]

    # --- messages -----------------------------------------------------------------------

    async def send(self, p: mm.SendParams, conn: Conn) -> mm.SendResult:
        self._enabled()
        to = p.to or await self._reply_target(p.session_id, p.reply_to)
        m = self.mb.send(p.session_id, to, p.text, reply_to=p.reply_to)
        try:
            await self.commit()
        except MeshError:
            self.mb.discard(m.id)
            raise
        return mm.SendResult(
            id=m.id, to=m.to, state=m.state, created_at=rfc3339(m.created_at), depth=m.depth,
            host=self.fleet.remote_host(m.to),
        )  # fmt: skip

    async def _reply_target(self, sid: str, reply_to: int | None) -> str:
        if reply_to is None:
            # A param is missing (SPEC §3: -32602 with its path), nothing was looked up.
            raise InvalidParams("give `to`, or `reply_to` to answer a message", {"path": "$.to"})
        known = self.mb.reply_target(sid, reply_to)
        if known is None:
            parties = await self._read(lambda db: sm.message_parties(db, reply_to))
            if parties is None or sid not in parties:
                # another pair's message is not the replier's to answer, nor to learn of
                raise NotFound(f"no message {reply_to} to reply to", {"reply_to": reply_to})
            sender, to = parties
            known = sender if to == sid else to
        if known == DAEMON_SENDER:  # no session to reply to: the daemon's own notice
            raise MessageRefused(
                f"#{reply_to} is a notice from the mesh daemon, which takes no reply",
                {"session_id": DAEMON_SENDER, "reason": "notice", "reply_to": reply_to},
            )
        return known

    async def inbox(self, p: mm.InboxParams, conn: Conn) -> mm.InboxResult:
        mb = self.mb
        if not p.all:
            got = await self._hand_over(p.session_id, p.peek, p.limit, None)
            items = [item_of(m) for m in got]
            return mm.InboxResult(items=items, unread=mb.unread_count(p.session_id))
        self.svc.state.registry.get(p.session_id)
        page = await self._read(
            lambda db: sm.inbox_page(db, p.session_id, limit=p.limit, before=p.before)
        )
        got = await self._hand_over(p.session_id, p.peek, p.limit, [i.id for i in page])
        handed = {m.id: m for m in got}
        items = [item_of(handed.get(m.id, m)) for m in page]
        return mm.InboxResult(items=items, unread=mb.unread_count(p.session_id))

    async def _hand_over(
        self, sid: str, peek: bool, limit: int, only: list[int] | None
    ) -> list[Message]:
        """Store the new states of the items handed over, *then* change them in memory:
        a read the disk refused (UNAVAILABLE) leaves every item as it was.

        A peek the disk refuses is still answered, with the items as they are (``queued``
        ones stay queued): it reads, and SPEC §8 keeps reads served when the database
        cannot be written; all it would have stored is that they were seen. A read that
        marks items read is refused: it must not show as consumed what stays unread.
        """
        mb, now = self.mb, self.svc.clock.now()
        ids, writes = mb.plan_inbox(sid, peek=peek, limit=limit, only=only, now=now)
        try:
            return await self.svc.store_first(
                writes,
                lambda: mb.inbox(sid, peek=peek, limit=limit, only=ids, now=now, stored=True),
            )
        except StorageUnavailable:
            if not peek:
                raise
            wanted = set(ids)
            return [m for m in mb.unread(sid) if m.id in wanted]

    async def ack(self, p: mm.AckParams, conn: Conn) -> mm.AckResult:
        now, mb = self.svc.clock.now(), self.mb
        done = await self.svc.store_first(
            mb.ack_writes(p.session_id, p.ids, now=now),
            lambda: mb.ack(p.session_id, p.ids, now=now, stored=True),
        )
        return mm.AckResult(acked=done)

    async def status(self, p: mm.StatusParams, conn: Conn) -> mm.StatusResult:
        states = await self._read(lambda db: sm.message_states(db, p.session_id, p.ids))
        return mm.StatusResult(states={str(k): cast(Any, v) for k, v in states.items()})

    # --- queries ------------------------------------------------------------------------

    async def ask(self, p: mm.AskParams, conn: Conn) -> mm.AskResult | Later:
        self._enabled()
        host = self.fleet.remote_host(p.to)
        if host is not None:  # a session of another host: request/reply (docs/FLEET.md)
            return Later.running(self._ask_host(p, host))
        r = self.mb.ask(
            p.session_id, p.to, p.question, timeout=p.timeout, claims=self.claims_of(p.to)
        )
        await self.commit()
        if isinstance(r, Answer):
            return ask_result(r)
        return self._wait_ask(r)  # answered later; the connection reads on meanwhile

    async def _ask_host(self, p: mm.AskParams, host: str) -> mm.AskResult:
        """An ask to a session on ``host``, answered by that host (or UNAVAILABLE)."""
        ans = await self.fleet.ask(p.session_id, p.to, host, p.question, timeout=p.timeout)
        return ask_result(ans)

    def _wait_ask(self, q: Query) -> _Ask:
        """The record that answers the ask of pending query ``q`` (see :meth:`_wake`)."""
        ask = _Ask(self, q.id)
        if q.over:  # over already: answered in the next pass
            asyncio.get_running_loop().call_soon(ask.finish)
            return ask
        self._asks[q.id] = ask
        left = max(0.0, q.deadline - self.svc.clock.monotonic())
        ask.timer = asyncio.get_running_loop().call_later(left, ask.finish)
        return ask

    async def answer(self, p: mm.AnswerParams, conn: Conn) -> mm.AnswerResult:
        woken: list[_Ask] = []
        self._answered = woken
        try:
            late = self.mb.answer(p.session_id, p.query_id, p.text, p.by)
        finally:
            self._answered = None
            for ask in woken:  # the asker's reply first: it is the one waiting
                ask.finish()
        if late is None:
            return mm.AnswerResult(query_id=p.query_id)
        await self.commit()
        return mm.AnswerResult(query_id=p.query_id, late=True, message_id=late.id)

    def respond(self, p: mm.RespondParams, conn: Conn) -> mm.RespondResult:
        self.mb.respond(p.session_id, conn.id)
        self.svc.subscribe(conn, responder_channel(p.session_id))
        return mm.RespondResult(session_id=p.session_id)

    def subscribe(self, p: mm.SubscribeParams, conn: Conn) -> mm.SubscribeResult:
        unread = self.mb.subscribe(p.session_id, conn.id)
        self.svc.subscribe(conn, p.session_id)
        return mm.SubscribeResult(session_id=p.session_id, unread=unread)

    # --- broadcasts ---------------------------------------------------------------------

    async def broadcast(self, p: mm.BroadcastParams, conn: Conn) -> mm.BroadcastResult | Later:
        self._enabled()
        at = await self.path_key(p.path) if p.path is not None else None
        select = self._at(at) if at is not None else None
        out = self.mb.broadcast(
            p.session_id, p.text, select=select, collect=p.collect, timeout=p.timeout,
            claims_of=self.claims_of,
        )  # fmt: skip
        transport = self.fleet.transport
        fleet = transport is not None
        if transport is not None and not p.collect:  # every other host's, through the stream
            self.fleet.to_all(
                wire.MailItem(
                    kind="broadcast", sender=p.session_id, from_host=self.fleet.host,
                    created_at=self.svc.clock.now(), text=p.text, path=p.path,
                )
            )  # fmt: skip
            out.recipients += _reached(transport.other_sessions(), at)
        await self.commit()
        result = mm.BroadcastResult(
            recipients=out.recipients, message_ids=[m.id for m in out.messages],
            skipped=out.skipped, answers=[ask_result(a) for a in out.answers],
        )  # fmt: skip
        if not out.pending and not (fleet and p.collect):
            return result  # nothing to wait for
        return Later.running(self._gather(p, out.chain, out.pending, result, fleet))

    async def _gather(
        self, p: mm.BroadcastParams, chain: tuple[str, ...], pending: list[Query],
        result: mm.BroadcastResult, fleet: bool,
    ) -> mm.BroadcastResult:  # fmt: skip
        """A collected broadcast's answers: this host's and the other hosts' at once."""
        answers: list[Answer] = []
        async with anyio.create_task_group() as tg:
            if fleet and p.collect:
                tg.start_soon(self._collect_remote, p, chain, result, answers)
            answers += await self.wait_answers(pending)
        result.answers += [ask_result(a) for a in answers]
        return result

    async def _collect_remote(
        self,
        p: mm.BroadcastParams,
        chain: tuple[str, ...],
        result: mm.BroadcastResult,
        answers: list[Answer],
    ) -> None:
        """The other hosts' part of a collected broadcast, merged into ``result``."""
        for part in await self.fleet.collect(
            p.session_id, p.text, chain=chain, timeout=p.timeout, path=p.path
        ):
            if part.error is not None:
                result.skipped[f"host:{part.host}"] = part.error.message
                continue
            result.recipients += part.recipients
            result.skipped.update(part.skipped)
            answers.extend(answer_of(r) for r in part.answers)

    async def overlapping(self, path: str) -> Callable[[Session], bool]:
        """Sessions whose claims, cwd or repo overlap ``path`` (canonicalised as a claim,
        off the event loop)."""
        return self._at(await self.path_key(path))

    async def path_key(self, path: str) -> Key:
        """``path`` canonicalised as a claim is, off the event loop."""
        home = os.path.expanduser("~")
        return await self.svc.resolve_paths(
            [path], lambda: canonical_key(path, home=home, broad=True)
        )

    def _at(self, key: Key) -> Callable[[Session], bool]:
        """Sessions here whose claims, cwd or repo overlap ``key``."""
        table = self.svc.state.claims

        def select(s: Session) -> bool:
            for where in (s.cwd, s.repo):
                if where and path_key("file", where).overlaps(key):
                    return True
            mine = table.list_claims(s.session_id)
            return any(c.key.overlaps(key) for c in mine)

        return select

    # --- handoffs -----------------------------------------------------------------------

    async def handoff_write(self, p: mm.HandoffWriteParams, conn: Conn) -> mm.HandoffInfo:
        h = self.mb.write_handoff(
            p.session_id, p.summary, to=p.to, files=p.files, branch=p.branch,
            next_steps=p.next_steps,
        )  # fmt: skip
        await self.commit()
        return handoff_info(h)

    async def handoff_request(
        self, p: mm.HandoffRequestParams, conn: Conn
    ) -> mm.HandoffRequestResult | Later:
        self._enabled()
        host = self.fleet.remote_host(p.to)
        if host is not None:
            return Later.running(self._handoff_from_host(p, host))
        r = self.mb.ask(
            p.session_id, p.to, HANDOFF_QUESTION, timeout=p.timeout,
            claims=self.claims_of(p.to), request="handoff",
        )  # fmt: skip
        await self.commit()
        if isinstance(r, Answer):
            return await self._handoff_stored(p, r)
        return Later.running(self._handoff_answered(p, r))

    async def _handoff_from_host(
        self, p: mm.HandoffRequestParams, host: str
    ) -> mm.HandoffRequestResult:
        ans = await self.fleet.ask(
            p.session_id, p.to, host, HANDOFF_QUESTION, timeout=p.timeout, request="handoff"
        )
        return await self._handoff_stored(p, ans)

    async def _handoff_answered(
        self, p: mm.HandoffRequestParams, q: Query
    ) -> mm.HandoffRequestResult:
        return await self._handoff_stored(p, (await self.wait_answers([q]))[0])

    async def _handoff_stored(
        self, p: mm.HandoffRequestParams, ans: Answer
    ) -> mm.HandoffRequestResult:
        """The answer stored as a handoff addressed to the requester (SPEC §6)."""
        h = self.mb.write_handoff(
            ans.sender, ans.answer, to=p.session_id, require_live=False, deliver=False,
            by_status=ans.answered_by == "status",
        )  # fmt: skip
        await self.commit()
        return mm.HandoffRequestResult(
            handoff=handoff_info(h),
            answered_by=ans.answered_by,
            timed_out=ans.timed_out,
            elapsed_s=ans.elapsed_s,
        )

    async def handoff_list(self, p: mm.HandoffListParams, conn: Conn) -> mm.HandoffListResult:
        found = await self._read(
            lambda db: sm.handoff_list(
                db, p.session_id, every=p.all, limit=p.limit, before=p.before
            )
        )
        return mm.HandoffListResult(handoffs=[handoff_info(h) for h in found])

    async def handoff_show(self, p: mm.HandoffShowParams, conn: Conn) -> mm.HandoffInfo:
        h = await self._read(lambda db: sm.handoff_show(db, p.id))
        if h is None:
            raise NotFound(f"no handoff {p.id}", {"id": p.id})
        return handoff_info(h)


def _reached(others: list[SessionInfo], at: Key | None) -> list[str]:
    """The other hosts' live sessions a broadcast sent through the stream reaches, as
    the registry lists them (SPEC §12: ``recipients`` counts every host's): those that
    accept messages and, with ``--path`` (``at``), whose cwd, repo or listed claims
    overlap it -- the rule each host applies when the item arrives. A stale session is
    live and reached (its host delivers to it, as this host does to its own)."""
    return [
        i.session_id
        for i in others
        if i.accept_messages and (at is None or _remote_overlaps(i, at))
    ]


def _remote_overlaps(i: SessionInfo, key: Key) -> bool:
    """Whether another host's session (as its host listed it) is at ``key``: its cwd,
    its repo or one of its listed claims overlaps it."""
    for where in (i.cwd, i.repo):
        if where and path_key("file", where).overlaps(key):
            return True
    for c in i.claims:
        try:
            if from_canonical(c.resource).overlaps(key):
                return True
        except MeshError:
            continue
    return False


def ask_result(a: Answer) -> mm.AskResult:
    """The wire shape of an ask's outcome (SPEC §9 ``sessions ask --json``)."""
    return mm.AskResult(
        answer=a.answer, answered_by=a.answered_by, timed_out=a.timed_out, from_=a.sender,
        elapsed_s=a.elapsed_s, query_id=a.query_id, framing=mm.framing(a.sender),
    )  # fmt: skip
