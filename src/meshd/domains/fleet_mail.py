"""Mail across the fleet's hosts (SPEC §12, docs/FLEET.md): the daemon's side, no nats.

A domain with no methods of its own. It keeps the fleet's post office
(:class:`~meshd.core.mail.fleet_post.FleetPost`: the outbox and the seen keys) in memory and
in SQLite on every daemon, fleet or not -- without ``[fleet]`` nothing is ever posted
and the only cost is restoring two empty tables. While this host is in a fleet
(its :class:`~meshd.ports.FleetAccess` has a fleet; the fleet's ``mail`` is the
:class:`~meshd.ports.MailTransport`, and this domain the fleet's
:class:`~meshd.ports.MailDesk`):

* items the mailbox makes for sessions on other hosts (its ``outbound``), broadcasts
  and signals become outbox rows **in the same commit** as the call that made them
  (:meth:`drain`), and the link's forwarder publishes them (:mod:`meshd.fleet.mail`);
* what arrives is taken in by :meth:`take`: stored with its key in one commit, once.
* asks to sessions on other hosts go through :meth:`ask` (NATS request/reply), and
  asks from them are served by :meth:`serve_ask`, with the chain they carry.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable
from typing import Protocol

import msgspec

from meshd.core.mail.fleet_post import FleetPost
from meshd.core.mail.records import Answer, Message, Query, Request, clip
from meshd.core.sessions.records import Session
from meshd.core.state import Event, Write
from meshd.domain import NOTHING, Domain
from meshd.ports import FleetAccess, MailTransport
from meshd.protocol import fleet_mail as wire
from meshd.protocol.errors import (
    MeshError,
    StorageUnavailable,
    UnknownSession,
    error_from_wire,
)
from meshd.service import Service
from meshd.store import fleet_post as storage

log = logging.getLogger("meshd.fleet.mail")


class LocalMail(Protocol):
    """What mail from another host needs of this host's messages domain
    (:class:`~meshd.domains.messages.MessageHandlers`, which sends through this one)."""

    async def overlapping(self, path: str) -> Callable[[Session], bool]: ...

    def claims_of(self, sid: str) -> list[str]: ...

    async def commit(self) -> None: ...

    async def wait_answers(self, queries: list[Query]) -> list[Answer]: ...


class LocalSignals(Protocol):
    """What a signal from another host needs of this host's signals domain
    (:class:`~meshd.domains.signals.SignalHandlers`)."""

    async def take(self, name: str, payload: str, by: str | None) -> None: ...


class FleetMail(Domain):
    """The outbox, the seen keys, and the routing of mail to and from other hosts."""

    name = "fleet_mail"

    def __init__(self, svc: Service, *, fleet: FleetAccess) -> None:
        super().__init__(svc)
        self.post = FleetPost(svc.clock, self._new_key)
        self._fleet = fleet
        self._messages: LocalMail | None = None
        self._signals: LocalSignals | None = None

    def connect(self, *, messages: LocalMail, signals: LocalSignals) -> None:
        """The domains what arrives is handed to (``app.wire``: they are made after
        this one, and send through it)."""
        self._messages, self._signals = messages, signals

    def _new_key(self) -> str:
        # secrets.token_hex(16), without importing secrets (hmac, hashlib, random) at start-up
        return f"{self.host}:{os.urandom(16).hex()}"

    @property
    def transport(self) -> MailTransport | None:
        """This host's mail link while it is in a fleet; None when it is alone."""
        fleet = self._fleet.fleet
        return None if fleet is None else fleet.mail

    def remote_host(self, sid: str) -> str | None:
        """The host of ``sid`` if it is a session of another host, else None."""
        if sid in self.svc.state.registry.sessions:
            return None
        t = self.transport
        if t is None:
            return None
        host = t.host_of(sid)
        return None if host == t.host else host

    # --- domain hooks -------------------------------------------------------------------

    def install(self) -> None:
        """No methods: messages, asks, broadcasts and signals route through here."""
        self.svc.state.mailbox.host_of = self.remote_host

    def restore(self, db: sqlite3.Connection) -> None:
        got = storage.load(db)
        self.post.restore(got.pending, got.seen)

    def drain(self) -> tuple[list[Write], list[Event]]:
        """The mailbox's items for other hosts become outbox rows; the post's writes."""
        mb = self.svc.state.mailbox
        if not mb.outbound and not self.post.writes:
            return NOTHING
        if mb.outbound:
            out, mb.outbound = mb.outbound, []
            for host, m in out:
                self._mail(host, m)
        return self.post.drain(), []

    def forget(self, refused: list[Write]) -> None:
        self.post.forget(refused)

    def sent(self) -> None:
        """The link published outbox rows: their removal is stored (``fleet.sent``)."""
        self.svc.flush_background()

    def committed(self, writes: list[Write], events: list[Event]) -> None:
        t = self.transport
        if t is not None and any(w[0] == "fleet.out" for w in writes):
            t.kick()

    def prune(self, history_days: float) -> None:
        self.post.prune()

    # --- out ----------------------------------------------------------------------------

    def _mail(self, host: str, m: Message) -> None:
        t = self.transport
        if t is None:  # left the fleet between the call and its commit: kept here
            self.svc.state.mailbox.put_item(
                m.sender, m.to, m.kind, m.text, depth=m.depth, here=True
            )
            return
        h = self.svc.state.mailbox.handoffs_out.pop(m.id, None)
        body = None
        if h is not None and m.kind == "handoff":
            body = wire.HandoffBody(
                summary=h.summary, files=list(h.files), branch=h.branch,
                next_steps=list(h.next_steps),
            )  # fmt: skip
        item = wire.MailItem(
            kind=m.kind if m.kind in ("message", "handoff", "answer", "notice") else "message",
            sender=m.sender, from_host=t.host, created_at=m.created_at,
            to=m.to, text=m.text, depth=m.depth, handoff=body,
        )  # fmt: skip
        self.post.post(t.mail_subject(host), item.encoded)

    def to_all(self, item: wire.MailItem) -> None:
        """Post ``item`` (a broadcast, a signal) for every other host; a no-op alone."""
        t = self.transport
        if t is not None:
            self.post.post(t.mail_subject(None), item.encoded)

    @property
    def host(self) -> str:
        t = self.transport
        return t.host if t is not None else ""

    async def ask(
        self,
        asker: str,
        to: str,
        host: str,
        question: str,
        *,
        timeout: float,
        request: Request = "question",
    ) -> Answer:
        """Ask ``to`` on ``host``: the rules the asker's host applies, then request/reply.

        Raises what ``host`` raised (``QUERY_REFUSED``, ``CYCLE``, …) and
        ``UNAVAILABLE`` when ``host`` cannot be reached: a bounded question does not
        wait for the fleet to come back.
        """
        t = self.transport
        if t is None:
            raise UnknownSession(f"unknown session {to!r}", {"session_id": to})
        mb = self.svc.state.mailbox
        chain = mb.desk.ask_out(asker, to, question)
        timeout = min(timeout, self.svc.state.settings.max_query_timeout)
        req = wire.AskRequest(
            asker=asker, from_host=t.host, to=to, question=question,
            timeout=timeout, chain=list(chain), request=request,
        )  # fmt: skip
        started = self.svc.clock.monotonic()
        raw = await t.request(host, wire.encode(req), timeout + ASK_GRACE)
        reply = wire.decode_reply(raw)
        if reply.error is not None:
            raise error_from_wire(
                {"code": reply.error.code, "message": reply.error.message,
                 "data": reply.error.data}
            )  # fmt: skip
        elapsed = round(self.svc.clock.monotonic() - started, 3)
        return Answer(0, reply.answer, reply.answered_by, reply.timed_out, reply.sender, elapsed)

    async def collect(
        self,
        sender: str,
        text: str,
        *,
        chain: tuple[str, ...],
        timeout: float,
        path: str | None,
    ) -> list[wire.CollectReply]:
        """A collected broadcast's part on the other hosts: one reply per host that has
        something to say, gathered until every host the registry knows answered or the
        timeout (plus the way back) ran out."""
        t = self.transport
        if t is None:
            return []
        timeout = min(timeout, self.svc.state.settings.max_query_timeout)
        req = wire.CollectRequest(
            sender=sender, from_host=t.host, text=text, timeout=timeout, chain=list(chain),
            path=path,
        )  # fmt: skip
        try:
            raws = await t.gather(wire.encode(req), timeout + ASK_GRACE)
        except MeshError as exc:
            return [wire.CollectReply(host="*", error=wire.WireError(**exc.to_wire()))]
        out = []
        for raw in raws:
            try:
                out.append(wire.decode_collected(raw))
            except msgspec.DecodeError as exc:
                log.warning("fleet: an unreadable collect reply: %s", exc)
        return out

    # --- in -----------------------------------------------------------------------------

    async def serve_collect(self, raw: bytes) -> bytes | None:
        """This host's part of another host's collected broadcast (None: not ours)."""
        try:
            req = wire.decode_collect(raw)
        except msgspec.DecodeError as exc:
            log.warning("fleet: an unreadable collect request: %s", exc)
            return None
        if req.from_host == self.host:
            return None
        msgs = self._msgs()
        mb = self.svc.state.mailbox
        try:
            select = await msgs.overlapping(req.path) if req.path else None
        except MeshError as exc:
            err = wire.WireError(**exc.to_wire())
            return wire.encode(wire.CollectReply(host=self.host, error=err))
        out = mb.desk.broadcast_in(
            req.sender, req.text, chain=req.chain, select=select, collect=True,
            timeout=req.timeout, claims_of=msgs.claims_of,
        )  # fmt: skip
        await msgs.commit()
        answers = out.answers + await msgs.wait_answers(out.pending)
        return wire.encode(
            wire.CollectReply(
                host=self.host, recipients=out.recipients, skipped=out.skipped,
                answers=[_reply(a) for a in answers],
            )
        )  # fmt: skip

    async def serve_ask(self, raw: bytes) -> bytes:
        """Answer an ask from another host (the reply's bytes; errors go in the reply)."""
        try:
            req = wire.decode_ask(raw)
            return wire.encode(await self._serve(req))
        except MeshError as exc:
            w = exc.to_wire()
            return wire.encode(wire.AskReply(error=wire.WireError(**w)))
        except msgspec.DecodeError as exc:  # a ValidationError too
            return wire.encode(wire.AskReply(error=wire.WireError(-32602, f"bad fleet ask: {exc}")))

    async def _serve(self, req: wire.AskRequest) -> wire.AskReply:
        msgs = self._msgs()
        mb = self.svc.state.mailbox
        claims = msgs.claims_of(req.to) if req.to in self.svc.state.registry.sessions else []
        r = mb.desk.ask_in(
            req.asker, req.to, req.question, chain=req.chain, timeout=req.timeout,
            claims=claims, request=req.request,
        )  # fmt: skip
        if isinstance(r, Answer):
            return _reply(r)
        await msgs.commit()  # the query event for the responders
        return _reply((await msgs.wait_answers([r]))[0])

    def answers_at_once(self, raw: bytes) -> bool:
        """Whether an ask is answered without waiting (no live responder for its target,
        or it is refused): the link serves such an ask inline, without a task."""
        try:
            to = wire.decode_ask(raw).to
        except msgspec.DecodeError:
            return True
        return not self.svc.state.mailbox.has_responder(to)

    async def take(self, key: str, item: wire.MailItem) -> bool:
        """Take in one fleet item unless its key was seen; stored with its key in one
        commit before this returns (the caller acks the stream only then). False: a
        copy seen before, dropped."""
        if not self.post.is_new(key):
            return False
        if item.kind == "signal":
            await self._take_signal(key, item)
            return True
        msgs = self._msgs()
        mb = self.svc.state.mailbox
        if item.to is None:
            mb.desk.broadcast_in(item.sender, item.text, select=await self._select(item.path))
        elif self._refuses(item):
            mb.notice(
                item.sender,
                f"{item.to} does not accept messages: your message was not delivered "
                f"({clip(item.text, 200)})",
            )
        elif item.kind == "handoff" and item.handoff is not None:
            self._take_handoff(item, item.handoff)
        else:
            mb.put_item(item.sender, item.to, item.kind, item.text, depth=item.depth, here=True)
        self.post.take(key)
        await msgs.commit()
        return True

    def _take_handoff(self, item: wire.MailItem, h: wire.HandoffBody) -> None:
        """A handoff for a session here: recorded here too (its ``handoff list`` shows
        it), and in its inbox as before. One this host's limits refuse (a smaller
        ``max_body_bytes``) is kept as the item's text alone, never lost."""
        mb = self.svc.state.mailbox
        try:
            mb.write_handoff(
                item.sender, h.summary, to=item.to, files=h.files, branch=h.branch,
                next_steps=h.next_steps, require_live=False, here=True,
            )  # fmt: skip
        except MeshError as exc:
            log.info("fleet: a handoff from %s is kept as its text: %s", item.sender, exc)
            mb.put_item(item.sender, item.to or "", "handoff", item.text, here=True)

    async def _select(self, path: str | None) -> Callable[[Session], bool] | None:
        """The sessions here a broadcast's ``--path`` reaches; a path this host cannot
        make canonical (a bad key here) reaches none of them, and the item is taken."""
        if path is None:
            return None
        try:
            return await self._msgs().overlapping(path)
        except MeshError as exc:
            if isinstance(exc, StorageUnavailable):
                raise
            log.info("fleet: broadcast path %r reaches no session here: %s", path, exc)
            return lambda s: False

    def _refuses(self, item: wire.MailItem) -> bool:
        """A message for a session here that does not accept messages (told back to its
        sender as a notice through the fleet: the sender's host could not know)."""
        s = self.svc.state.registry.sessions.get(item.to or "")
        return item.kind == "message" and s is not None and not s.accept_messages

    async def _take_signal(self, key: str, item: wire.MailItem) -> None:
        assert self._signals is not None, "app.wire connects the fleet mail"
        self.post.take(key)
        await self._signals.take(item.name or "", item.payload or "null", item.sender)

    def _msgs(self) -> LocalMail:
        assert self._messages is not None, "app.wire connects the fleet mail"
        return self._messages


def _reply(a: Answer) -> wire.AskReply:
    return wire.AskReply(
        answer=a.answer, answered_by=a.answered_by, timed_out=a.timed_out, sender=a.sender,
        elapsed_s=a.elapsed_s, query_id=a.query_id,
    )  # fmt: skip


def answer_of(r: wire.AskReply) -> Answer:
    """An answer that came from another host, as the handlers return one."""
    return Answer(r.query_id, r.answer, r.answered_by, r.timed_out, r.sender, r.elapsed_s)


ASK_GRACE = 2.0
"""Seconds an ask across hosts waits for the reply beyond its own timeout: the remote
host answers by the timeout (its status responder at the latest); this covers the way."""
