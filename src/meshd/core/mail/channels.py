"""Who reads and who answers each session's mail (SPEC §6): the connection tables.

Pure and synchronous. A *subscriber* connection is pushed a session's items as they
arrive; a *responder* connection is given its questions. Both are kept twice, by
session and by connection, so a closed connection costs what it held rather than a
scan of every session. The :class:`~meshd.core.mail.mailbox.Mailbox` checks that the
session exists and tells its query desk when a session's last responder leaves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Channels:
    """The subscriber and responder connections of every session."""

    def __init__(self) -> None:
        self.responders: dict[str, set[int]] = {}
        self.subscribers: dict[str, set[int]] = {}
        # The same, by connection: a close costs what it held, not a scan of every session.
        self._responding: dict[int, set[str]] = {}
        self._subscribed: dict[int, set[str]] = {}

    def subscribe(self, sid: str, conn_id: int) -> None:
        """Count connection ``conn_id`` as a reader of ``sid``'s pushes."""
        self.subscribers.setdefault(sid, set()).add(conn_id)
        self._subscribed.setdefault(conn_id, set()).add(sid)

    def respond(self, sid: str, conn_id: int) -> None:
        """Make ``conn_id`` a live responder of ``sid`` (until the connection closes)."""
        self.responders.setdefault(sid, set()).add(conn_id)
        self._responding.setdefault(conn_id, set()).add(sid)

    def has_responder(self, sid: str) -> bool:
        return bool(self.responders.get(sid))

    def has_subscriber(self, sid: str) -> bool:
        """Whether a connection is subscribed to ``sid``'s events right now."""
        return bool(self.subscribers.get(sid))

    def connection_closed(self, conn_id: int, responder_gone: Callable[[str], object]) -> None:
        """Forget a closed connection as subscriber and responder; ``responder_gone``
        is called with each session it leaves with no live responder."""
        for table, mine in (
            (self.subscribers, self._subscribed),
            (self.responders, self._responding),
        ):
            for sid in mine.pop(conn_id, ()):
                if _unlink(table, sid, conn_id) and table is self.responders:
                    responder_gone(sid)

    def session_ended(self, sid: str) -> None:
        """Forget ``sid``'s subscribers and responders."""
        for table, mine in (
            (self.subscribers, self._subscribed),
            (self.responders, self._responding),
        ):
            for conn_id in table.pop(sid, ()):
                _unlink(mine, conn_id, sid)

    def counts(self) -> tuple[int, int]:
        """How many (responder, subscriber) connections, summed over sessions."""
        return (
            sum(len(c) for c in self.responders.values()),
            sum(len(c) for c in self.subscribers.values()),
        )


def _unlink(index: dict[K, set[V]], key: K, member: V) -> bool:
    """Take ``member`` out of ``index[key]``, dropping the set once empty; True when
    this emptied it (the two indexes mirror each other: each side unlinks the other)."""
    members = index.get(key)
    if members is None:
        return False
    members.discard(member)
    if members:
        return False
    del index[key]
    return True
