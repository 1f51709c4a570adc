"""Handoffs (SPEC §6): each session's latest ones, for the status responder.

Only the ones a session wrote count: a requested handoff that the status responder
answered is stored (addressed to the requester) but never quoted as the session's own,
or each request would nest the status answer before it.

Pure and synchronous. Every handoff is durable (a ``("handoff.put", Handoff)``
write); memory keeps only each sender's latest per addressee (``None``: unaddressed),
which is what the status responder quotes. One addressed to a live session, or to
one on another host, also lands in its inbox through the
:class:`~meshd.core.mail.mailbox.Mailbox`, whose writes, settings and registry it uses.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from meshd.core.mail.parts import MailboxParts
from meshd.core.mail.records import MAX_FILES, Handoff, clip, handoff_text
from meshd.protocol.errors import InvalidParams, MessageRefused, TooLarge


class HandoffBook:
    """The latest handoff of each sender to each addressee, and the handoff ids."""

    def __init__(self, mb: MailboxParts) -> None:
        self.mb = mb
        self._handoffs: dict[str, dict[str | None, Handoff]] = {}
        self._next_handoff = 1

    def restore(self, handoffs: Iterable[Handoff], max_handoff_id: int = 0) -> None:
        """Take back each session's latest handoffs and where the id sequence stands."""
        top_h = max_handoff_id
        for h in handoffs:
            top_h = max(top_h, h.id)
            self._keep_handoff(h)
        self._next_handoff = max(self._next_handoff, top_h + 1)

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
        here: bool = False,
        by_status: bool = False,
    ) -> Handoff:
        """A durable handoff; one addressed to a live session also lands in its inbox.

        ``require_live=False`` stores one for a sender that may just have ended (a
        requested handoff, answered by the status responder); ``deliver=False``
        skips the inbox item (the requester gets the handoff in its reply). One
        addressed to a session on another host goes there with its item, to be
        recorded there too; ``here``: one that came from another host that way (its
        item is kept here, whoever it names). ``by_status``: the status responder
        wrote it (stored, never quoted by the status responder as the sender's own).
        """
        mb = self.mb
        if require_live:
            mb.registry.get(sender)
        if len(files) > MAX_FILES:
            raise TooLarge(
                f"{len(files)} files; the limit is {MAX_FILES}",
                {"path": "$.files", "limit": MAX_FILES},
            )
        if to == sender:
            raise InvalidParams("a handoff to oneself is a note", {"path": "$.to"})
        target = mb.registry.sessions.get(to) if deliver and to is not None else None
        if target is not None and not target.accept_messages and here:
            deliver = False  # from another host: kept for its handoff list, never its inbox
        elif target is not None and not target.accept_messages:  # as a message to it is
            raise MessageRefused(
                f"{to} does not accept messages, so it takes no handoff addressed to it; "
                "leave it unaddressed (for whoever comes next) instead",
                {"session_id": to},
            )
        h = Handoff(
            id=self._next_handoff, sender=sender, to=to, summary=summary, files=tuple(files),
            branch=branch, next_steps=tuple(next_steps), created_at=mb.clock.now(),
            by_status=by_status,
        )  # fmt: skip
        mb.check_body(handoff_text(h), "$.summary")
        self._next_handoff += 1
        self._keep_handoff(h)
        mb.writes.append(("handoff.put", h))
        if deliver and to is not None and (here or to in mb.registry.sessions or mb.host_of(to)):
            text = clip(handoff_text(h), mb.settings.max_body_bytes)
            item = mb.put_item(sender, to, "handoff", text, here=here)
            if mb.outbound and mb.outbound[-1][1] is item:  # for another host
                mb.handoffs_out[item.id] = h
        return h

    def _keep_handoff(self, h: Handoff) -> None:
        if h.by_status:  # the daemon's words, not the session's: never quoted as its own
            return
        mine = self._handoffs.setdefault(h.sender, {})
        old = mine.get(h.to)
        if old is None or old.id < h.id:
            mine[h.to] = h

    def handoff_for(self, sid: str, asker: str) -> Handoff | None:
        """``sid``'s latest handoff that ``asker`` may see: unaddressed, or addressed to it."""
        mine = self._handoffs.get(sid, {})
        seen = [h for h in (mine.get(None), mine.get(asker)) if h is not None]
        return max(seen, key=lambda h: h.id) if seen else None

    def discard_handoff(self, h: Handoff) -> None:
        """Forget a new handoff whose storage failed (the status responder must not
        quote it): the previous one of the same sender and addressee comes back only
        after a restart, so until then none is quoted."""
        mine = self._handoffs.get(h.sender, {})
        if mine.get(h.to) is h:
            del mine[h.to]
