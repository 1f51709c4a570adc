"""The inbox as the daemon pushes it: what a hook hands the model, with no round trip.

Every tool call's ``transform_tool_result`` and every turn's ``pre_llm_call`` carry
what waits for the session. Asking the daemon for it (``message.inbox``) held up
every tool call by a round trip, almost always to learn that nothing waits. So the
responder's connection (:mod:`._responder`), already open for questions, also
subscribes to each session's events (SPEC §6: new items, claim and preemption
notices, changed-file notices) and puts them here; the hook reads this view.

Nothing is lost on the way (the rules, and how each is kept):

- **An item stays in the daemon's inbox until it reached the model.** A push makes
  it ``delivered``, never ``read``; the plugin acknowledges it (``message.ack``,
  sent by the sender thread: :class:`Acks`) only after a hook put its text into a
  tool result or a turn. An item the plugin never surfaced is still unread on the
  daemon, and a later read of the inbox finds it.
- **The view is trusted only once in sync.** On every (re)connection of the
  responder, and each time a session is registered (again), the session is
  subscribed first and its inbox read once after (``message.inbox``, peek): what
  came before the subscription is in that read, what came after is pushed, and
  both are merged by item id. Until then, and from the moment the connection is
  lost (the daemon restarted, or dropped the reader for falling behind), the hook
  reads the inbox itself, as before.
- **Pushed-only notices are held here until surfaced.** With a subscriber, the
  daemon pushes a changed-file notice instead of keeping it in the inbox, and
  claim ``granted``/``released`` notices never are kept. Changed-file notices are
  held in this process's memory until a hook surfaces them (if Hermes dies, they
  die with its sessions; one still on its way when the connection drops is lost, as
  for every subscriber: the daemon never kept it); ``granted``/``released`` are not
  shown, as before, since the inbox never had them.
- **Nothing is shown twice.** The ids a hook surfaced (or the model read with
  ``mesh_inbox``) are remembered (the last :data:`SEEN` of them): a later push or
  inbox read of the same item, before its acknowledgement landed, is dropped.
- **Nothing is kept for a session that ended.** A push, or an inbox read, that comes
  in for a session the process no longer tracks (between its end here and the
  daemon's, or for a registration since ended) is dropped: a gateway that ends many
  sessions over weeks keeps nothing of them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from ._common import Host, Tracked
from ._sender import Outbox, Sender

#: Item ids remembered as surfaced (a push or read of one of them is not shown again).
SEEN = 4096
#: Pushed-only notices held per session (beyond: the oldest go first). Items with an
#: id are bounded by the daemon's send budgets.
MAX_HELD = 512
#: Acknowledgements kept for sending (beyond: not sent; those items stay unread).
MAX_ACKS = 4096
#: Event kinds that are inbox items as such.
ITEM_KINDS = frozenset({"message", "answer", "handoff", "notice", "broadcast"})

Item = dict[str, Any]


def item_of_event(event: Mapping[str, Any]) -> Item | None:
    """The inbox item a pushed event stands for, as the inbox would show it (None:
    nothing to show: a question, a ``granted``/``released`` claim notice, a feed).

    Claim losses and preemptions carry the id and text of the durable notice they
    put in the inbox: shown as that notice. A changed-file notice has no inbox item
    (pushed instead): a notice without an id.
    """
    kind = event.get("kind")
    text = event.get("text")
    if not isinstance(text, str):
        return None
    item_id = event.get("id")
    if kind in ITEM_KINDS and isinstance(item_id, int):
        return {"id": item_id, "kind": kind, "from": str(event.get("from") or ""), "text": text}
    if kind == "file.changed":
        return {"id": None, "kind": "notice", "from": "meshd", "text": text}
    if isinstance(item_id, int) and isinstance(kind, str) and kind != "query":
        return {"id": item_id, "kind": "notice", "from": str(event.get("from") or "meshd"),
                "text": text}  # fmt: skip
    return None


class View:
    """What waits for each session of the process, as pushed (see the module's doc)."""

    def __init__(self, sessions: Mapping[str, Tracked]) -> None:
        #: the process's sessions (the runtime's): what comes for others is dropped
        self.sessions = sessions
        self._lock = threading.Lock()
        self._held: dict[str, list[Item]] = {}  # session -> items, in arrival order
        self._synced: dict[str, int] = {}  # session -> registration (epoch) in sync
        self._seen: dict[int, None] = {}  # ids surfaced, oldest first
        #: inbox requests the hooks sent themselves (view not in sync; tests, bench)
        self.fallbacks = 0

    def in_sync(self, t: Tracked) -> bool:
        """Whether ``t``'s view can be trusted: subscribed and read once since its
        latest registration, on a connection still open."""
        return self._synced.get(t.session_id) == t.epoch

    def lost(self) -> None:
        """The responder's connection is gone: no session's view is in sync."""
        self._synced.clear()

    def resync(self, t: Tracked, epoch: int, items: Iterable[Mapping[str, Any]]) -> None:
        """After subscribing ``t`` (registration ``epoch``): its inbox as read once
        (dropped when ``t`` is no longer the process's session of that id: it ended)."""
        with self._lock:
            if self.sessions.get(t.session_id) is not t:
                return
            self._merge(t.session_id, items)
            self._synced[t.session_id] = epoch

    def push(self, event: Mapping[str, Any]) -> bool:
        """A pushed event; True when it is an item the session will be shown (never
        for a session the process no longer tracks: it ended here, not yet on the
        daemon; its items stay there, unread)."""
        sid = event.get("session_id")
        item = item_of_event(event)
        if item is None or not isinstance(sid, str):
            return False
        with self._lock:  # the check and the merge under the lock forget takes
            if sid not in self.sessions:
                return False
            return self._merge(sid, [item]) > 0

    def take(self, t: Tracked, fetched: list[Item] | None = None) -> list[Item]:
        """What the session is to be shown now (held items, and ``fetched`` from a read
        of the inbox), each once, oldest first; marked surfaced. The common case,
        nothing held and nothing fetched, takes no lock."""
        sid = t.session_id
        if not fetched and not self._held.get(sid):
            return []
        with self._lock:
            if fetched:
                self._merge(sid, fetched)
            items = self._held.pop(sid, [])
            seen = self._seen
            for i in items:
                if i.get("id") is not None:
                    seen[i["id"]] = None
            while len(seen) > SEEN:
                del seen[next(iter(seen))]
        numbered = sorted((i for i in items if i.get("id") is not None), key=lambda i: i["id"])
        return numbered + [i for i in items if i.get("id") is None]

    def shown(self, sid: str, ids: Iterable[int]) -> None:
        """The model saw these items another way (``mesh_inbox``): not shown again."""
        with self._lock:
            gone = set(ids)
            for i in gone:
                self._seen[i] = None
            held = self._held.get(sid)
            if held:
                self._held[sid] = [i for i in held if i.get("id") not in gone]

    def forget(self, sid: str) -> None:
        """The session ended (called once it is out of :attr:`sessions`): nothing of
        it is kept, nor taken after."""
        with self._lock:
            self._held.pop(sid, None)
            self._synced.pop(sid, None)

    def held(self, sid: str) -> list[Item]:
        """A copy of what waits for ``sid`` (tests)."""
        with self._lock:
            return list(self._held.get(sid, []))

    def kept(self) -> set[str]:
        """The sessions the view keeps anything for (tests)."""
        with self._lock:
            return set(self._held) | set(self._synced)

    def _merge(self, sid: str, items: Iterable[Mapping[str, Any]]) -> int:
        """Add new items (by id; not surfaced yet); how many were added. Lock held."""
        held = self._held.get(sid)
        if held is None:
            held = self._held[sid] = []
        have = {i["id"] for i in held if i.get("id") is not None}
        added = 0
        for raw in items:
            item = dict(raw)
            item_id = item.get("id")
            if item_id is not None and (item_id in have or item_id in self._seen):
                continue
            held.append(item)
            if item_id is not None:
                have.add(item_id)
            added += 1
        loose = [n for n, i in enumerate(held) if i.get("id") is None]
        for n in reversed(loose[: max(0, len(loose) - MAX_HELD)]):
            del held[n]
        if not held:
            del self._held[sid]
        return added


class Acks(Outbox):
    """The acknowledgements of surfaced items, sent by the sender (off the hook's path).

    Kept while the daemon is away and sent once it is back (an item not acknowledged
    stays unread on the daemon: at worst shown again after a restart of Hermes, never
    lost). A session's are sent before it ends; those the daemon cannot take then (it
    is away or hung) are kept and sent once it is back, as the daemon takes the
    acknowledgements of a session that ended (left unsent, the items stayed unread
    for good: the session's next Hermes process showed them again)."""

    def __init__(self, host: Host, sender: Sender) -> None:
        self.host = host
        self.sender = sender
        self._lock = threading.Lock()
        self._pending: dict[str, list[int]] = {}
        #: message.ack calls sent (tests, bench)
        self.sent = 0

    def note(self, t: Tracked, items: Iterable[Mapping[str, Any]]) -> None:
        ids = [int(i["id"]) for i in items if isinstance(i.get("id"), int)]
        if not ids:
            return
        with self._lock:
            first = not self._pending
            mine = self._pending.setdefault(t.session_id, [])
            if sum(len(v) for v in self._pending.values()) + len(ids) <= MAX_ACKS:
                mine += ids
        if first:
            self.sender.wake()

    def flush(self, link: Any) -> bool:
        with self._lock:
            pending, self._pending = self._pending, {}
        kept: dict[str, list[int]] = {}
        for sid, ids in pending.items():
            if not self._send(link, sid, ids):
                kept[sid] = ids
        if not kept:
            return False
        with self._lock:
            for sid, ids in kept.items():
                self._pending[sid] = ids + self._pending.get(sid, [])
        return True

    def flush_session(self, t: Tracked, link: Any) -> None:
        with self._lock:
            ids = self._pending.pop(t.session_id, [])
        if ids and not self._send(link, t.session_id, ids):
            with self._lock:
                self._pending[t.session_id] = ids + self._pending.get(t.session_id, [])
            self.sender.wake()  # its flush finds the daemon away: tried again from then on

    def _send(self, link: Any, sid: str, ids: list[int]) -> bool:
        """True when done with ``ids`` (acknowledged, or refused for good)."""
        if link.down:
            return False
        self.sent += 1
        result = link.call("message.ack", {"session_id": sid, "ids": ids})
        return isinstance(result, dict) or not link.down
