"""What the mailbox's desks (items, handoffs, queries) use of the mailbox they serve.

:class:`~meshd.core.mail.mailbox.Mailbox` is the façade that builds the desks and
hands each of them itself; the desks see it through this protocol only, so the
façade imports the desks and no desk imports the façade.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from meshd.core.clock import Clock
from meshd.core.mail.records import Handoff, Message, Push, Write
from meshd.core.sessions.registry import Registry
from meshd.core.settings import Settings
from meshd.protocol.messages import ItemKind


class MailboxParts(Protocol):
    """The mailbox as its desks see it: its clock, settings, registry, outboxes, and
    what one desk offers the others."""

    clock: Clock
    settings: Settings
    registry: Registry
    writes: list[Write]
    events: list[Push]
    outbound: list[tuple[str, Message]]
    handoffs_out: dict[int, Handoff]
    host_of: Callable[[str], str | None]

    def new_id(self) -> int: ...

    def check_body(self, text: str, path: str = "$.text", limit: int | None = None) -> None: ...

    def check_budget(self, sender: str) -> None: ...

    def charge(self, sender: str) -> None: ...

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
    ) -> Message: ...

    def put_broadcast(self, sender: str, recipients: Sequence[str], text: str) -> list[Message]: ...

    def handoff_for(self, sid: str, asker: str) -> Handoff | None: ...

    def has_responder(self, sid: str) -> bool: ...
