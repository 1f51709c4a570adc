"""Bounded queries and broadcasts (SPEC §6): the pure part, a desk of the mailbox.

An ask either answers at once (no live responder: the status responder) or opens
a pending :class:`~meshd.core.mail.records.Query`; the shell waits for it and then
calls :meth:`QueryDesk.finish`, which never blocks: the answer if one came, else
the status answer marked ``timed_out``. :attr:`QueryDesk.wake` (set by the shell)
is called with a query id when waiting on it is over early (answered, or a party
ended). Chains (who is answering whom) bound how deep asks may nest. The desk
puts items, checks budgets and sizes through its :class:`~meshd.core.mail.mailbox.Mailbox`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from meshd.core.mail.parts import MailboxParts
from meshd.core.mail.records import (
    NOT_SENT,
    Answer,
    Broadcast,
    Message,
    Push,
    Query,
    Request,
    clip,
    handoff_text,
    responder_channel,
)
from meshd.core.sessions.registry import Session
from meshd.protocol.contract import rfc3339
from meshd.protocol.errors import Cycle, NotFound, QueryRefused
from meshd.protocol.events import QueryEvent
from meshd.protocol.messages import MAX_ANSWER_BYTES, MAX_CHAIN_DEPTH, AnsweredBy, framing


class QueryDesk:
    """The pending queries of one mailbox: their chains, deadlines and answers."""

    def __init__(self, mb: MailboxParts) -> None:
        self.mb = mb
        self.queries: dict[int, Query] = {}
        self.wake: Callable[[int], None] = lambda query_id: None

    def session_ended(self, sid: str) -> list[int]:
        """Close the queries to and from ``sid``; the ids of those whose waiters woke."""
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

    def responder_gone(self, sid: str) -> list[int]:
        """``sid``'s last live responder left: its open questions get the status answer.

        The questions were pushed to that connection alone, so no answer can come;
        their askers are told now (``answered_by: "status"``, not timed out, as when
        there is no live responder at all) instead of at their deadline. An answer
        that still comes (``query.answer`` names the query) is taken as a late one.
        Returns the ids of the queries whose waiters were woken.
        """
        woken = []
        for q in list(self.queries.values()):
            if q.target == sid and q.answer is None and not q.ended and not q.finished:
                q.no_responder = True
                woken.append(q.id)
                self.wake(q.id)
        return woken

    def sweep(self, now: float) -> None:
        """Forget closed queries (one never finished by then was abandoned by its waiter)."""
        for q in [q for q in self.queries.values() if now >= q.close_at]:
            del self.queries[q.id]

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
        self.mb.registry.get(asker)
        target = self.mb.registry.named(to, NOT_SENT)
        self.mb.check_body(question, "$.question")
        if not target.accept_queries:
            raise QueryRefused(f"{to} does not accept queries", {"session_id": to})
        chain = self._chain(asker, to)
        self.mb.check_budget(asker)
        self.mb.charge(asker)
        if not self.mb.has_responder(to):
            return self._status_answer(
                0, target, asker, claims=claims, timed_out=False, elapsed=0.0
            )
        return self._open_query(
            asker, to, question, chain=chain, timeout=timeout, claims=claims, request=request
        )

    # --- asks across hosts (docs/FLEET.md) ------------------------------------------------

    def ask_out(self, asker: str, to: str, question: str) -> tuple[str, ...]:
        """Check and charge an ask from local ``asker`` to ``to`` on another host.

        The rules the asker's host can apply: the asker is live, the size, the chain
        (returned, target last: it travels with the ask), the budget (charged here,
        once). ``to``'s host applies the rest (:meth:`ask_in`).
        """
        self.mb.registry.get(asker)
        self.mb.check_body(question, "$.question")
        chain = self._chain(asker, to)
        self.mb.check_budget(asker)
        self.mb.charge(asker)
        return chain

    def ask_in(
        self,
        asker: str,
        to: str,
        question: str,
        *,
        chain: Sequence[str],
        timeout: float,
        claims: Sequence[str] = (),
        request: Request = "question",
    ) -> Answer | Query:
        """An ask from ``asker`` on another host to local ``to``, with the chain its host
        derived: as :meth:`ask`, but the chain is the asker's (so an ask ``to`` makes
        while answering extends it) and the budget was charged there."""
        target = self.mb.registry.named(to, NOT_SENT)
        self.mb.check_body(question, "$.question")
        if not target.accept_queries:
            raise QueryRefused(f"{to} does not accept queries", {"session_id": to})
        full = (*chain, to) if not chain or chain[-1] != to else tuple(chain)
        if to in full[:-1] or len(full) - 1 > MAX_CHAIN_DEPTH:
            raise Cycle(
                f"asking {to} would come back to it or go deeper than {MAX_CHAIN_DEPTH}: "
                + " -> ".join(full),
                {"chain": list(full), "limit": MAX_CHAIN_DEPTH},
            )
        if not self.mb.has_responder(to):
            return self._status_answer(
                0, target, asker, claims=claims, timed_out=False, elapsed=0.0
            )
        return self._open_query(
            asker, to, question, chain=full, timeout=timeout, claims=claims, request=request
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
        now = self.mb.clock.monotonic()
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
        timeout = min(timeout, self.mb.settings.max_query_timeout)
        now_m, now_w = self.mb.clock.monotonic(), self.mb.clock.now()
        q = Query(
            id=self.mb.new_id(), asker=asker, target=to, question=question, request=request,
            chain=chain, created_at=now_w, created_mono=now_m, deadline=now_m + timeout,
            close_at=now_m + timeout + self.mb.settings.max_query_timeout, claims=tuple(claims),
        )  # fmt: skip
        self.queries[q.id] = q
        event = QueryEvent(
            session_id=to, id=q.id, from_=asker, text=question, created_at=rfc3339(now_w),
            state="delivered", to=to, framing=framing(asker), request=request, timeout_s=timeout,
            chain=list(chain),
        )  # fmt: skip
        # The channel is the responders'; the event is about ``to``.
        self.mb.events.append(Push(responder_channel(to), event))
        return q

    def answer(
        self, sid: str, query_id: int, text: str, by: AnsweredBy = "session"
    ) -> Message | None:
        """``sid`` answers its query ``query_id`` (``by``: its own answer, or its status
        written by its frontend).

        In time (its ask still waits): ``None``, and the waiter is woken. Late: the
        answer goes to the asker's inbox as kind ``answer`` (returned), unless it is a
        status (the asker had one already: dropped). Raises :class:`NotFound` for a
        query that is not ``sid``'s, answered or forgotten.
        """
        q = self.queries.get(query_id)
        if q is None or q.target != sid or q.answer is not None:
            raise NotFound(
                f"no open query {query_id} for {sid} (answered already, or too late)",
                {"query_id": query_id},
            )
        # Measured once it is known to be an answer: an id that is a message's instead
        # (`meshctl reply` tries a query first) is replied to under max_body_bytes.
        self.mb.check_body(text, limit=min(MAX_ANSWER_BYTES, self.mb.settings.max_body_bytes))
        q.answer, q.answered_by = text, by
        if not q.finished:
            self.wake(q.id)
            return None
        del self.queries[q.id]
        if by == "status":
            return None
        return self.mb.put_item(sid, q.asker, "answer", text, reply_to=q.id)

    def finish(self, query_id: int) -> Answer:
        """The outcome of a pending ask, now: its answer, or the status answer."""
        q = self.queries.get(query_id)
        if q is None or q.finished:
            raise NotFound(f"no pending query {query_id}", {"query_id": query_id})
        q.finished = True
        elapsed = round(self.mb.clock.monotonic() - q.created_mono, 3)
        if q.answer is not None or q.ended:
            del self.queries[q.id]
        if q.answer is not None:
            return Answer(q.id, q.answer, q.answered_by, False, q.target, elapsed)
        target = self.mb.registry.sessions.get(q.target)
        timed_out = not (q.ended or q.no_responder)
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
        s = self.mb.registry.sessions.get(sid)
        if s is None:
            return f"{sid} has ended."
        head = f"{sid} is {s.status}" + (f": {s.task}" if s.task else "")
        where = [f"in {s.cwd}"] if s.cwd else []
        if s.branch:
            where.append(f"on branch {s.branch}")
        parts = [head + (f" ({', '.join(where)})" if where else "") + "."]
        now = self.mb.clock.now()
        if s.liveness == "process":  # alive as long as its process, never stale (SPEC §4)
            idle = max(0, round(now - s.last_activity))
            parts.append(f"Alive: its process is running; idle for {idle} s.")
        else:
            parts.append(f"Last heard from {max(0, round(now - s.last_heartbeat))} s ago.")
        if claims:
            parts.append("Holds " + ", ".join(claims) + ".")
        h = self.mb.handoff_for(sid, asker)
        if h is not None:
            parts.append(f"Last handoff (#{h.id}): {handoff_text(h)}")
        parts.append("(Answered by the mesh from what the session reported.)")
        return clip(" ".join(parts), MAX_ANSWER_BYTES)

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
        self.mb.registry.get(sender)
        self.mb.check_body(text)
        self.mb.check_budget(sender)
        out = Broadcast()
        bases = [q.chain for q in self._open_queries() if q.target == sender] or [(sender,)]
        base = max(bases, key=len)
        if collect and len(base) > MAX_CHAIN_DEPTH:
            raise Cycle(
                f"{sender} is answering a query {len(base) - 1} deep; a collected broadcast "
                f"would go deeper than {MAX_CHAIN_DEPTH}",
                {"chain": list(base), "limit": MAX_CHAIN_DEPTH},
            )
        self.mb.charge(sender)
        out.chain = base
        return self._deliver(
            out, sender, text, select=select, collect=collect, timeout=timeout,
            claims_of=claims_of, bases=bases,
        )  # fmt: skip

    def broadcast_in(
        self,
        sender: str,
        text: str,
        *,
        chain: Sequence[str] = (),
        select: Callable[[Session], bool] | None = None,
        collect: bool = False,
        timeout: float = 10.0,
        claims_of: Callable[[str], Sequence[str]] = lambda sid: (),
    ) -> Broadcast:
        """A broadcast from ``sender`` on another host, to this host's sessions: as
        :meth:`broadcast`, with the chain the sender's host derived; the budget and the
        depth were checked there."""
        out = Broadcast(chain=tuple(chain) or (sender,))
        return self._deliver(
            out, sender, text, select=select, collect=collect, timeout=timeout,
            claims_of=claims_of, bases=[out.chain],
        )  # fmt: skip

    def _deliver(
        self,
        out: Broadcast,
        sender: str,
        text: str,
        *,
        select: Callable[[Session], bool] | None,
        collect: bool,
        timeout: float,
        claims_of: Callable[[str], Sequence[str]],
        bases: list[tuple[str, ...]],
    ) -> Broadcast:
        base = out.chain
        for s in list(self.mb.registry.sessions.values()):
            sid = s.session_id
            if sid == sender or (select is not None and not select(s)):
                continue
            why = self._broadcast_refusal(s, collect, bases)
            if why:
                out.skipped[sid] = why
                continue
            out.recipients.append(sid)
            if not collect:
                continue  # all put at once below: the same items, in the same order
            if self.mb.has_responder(sid):
                q = self._open_query(
                    sender, sid, text, chain=(*base, sid), timeout=timeout,
                    claims=claims_of(sid), request="broadcast",
                )  # fmt: skip
                out.pending.append(q)
                continue
            out.messages.append(self.mb.put_item(sender, sid, "broadcast", text))
            out.answers.append(
                self._status_answer(
                    0, s, sender, claims=claims_of(sid), timed_out=False, elapsed=0.0
                )
            )
        if not collect:
            out.messages = self.mb.put_broadcast(sender, out.recipients, text)
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
