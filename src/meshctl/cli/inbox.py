"""``meshctl inbox [--follow [--respond]]``: the session's items, printed and marked read
(SPEC §6, §9). Items are shown as :mod:`meshctl.cli.messages` renders them.

Decisions:

- ``inbox`` prints every unread item, up to 1,000 at a time (the protocol's largest
  page; past that a note on stderr says how many more wait, for the next run);
  ``inbox --all`` reads every page of the history (``before``).
- ``inbox`` marks read only what it has written out in full (SPEC §6): it
  fetches with ``peek``, prints item by item, waiting on a pipe until the reader
  has taken each (:func:`meshctl.cli._output.deliver`), then acks those. A reader
  that leaves early (``inbox | head``) leaves the rest unread and the exit is 1,
  never 0. ``--peek`` acks nothing.
- ``inbox --follow`` subscribes first, then prints the backlog, then each event
  as it arrives (one compact JSON object a line with ``--json``), acking every
  item once its reader has taken it, unless ``--peek``. It stops when its session ends
  (exit 0), reconnects when the daemon restarts, and runs until Ctrl-C.
- ``inbox --follow --json`` prints every line in the inbox item shape (SPEC §9): an
  event that is not an item (a claim loss, a preemption, a granted wait, changed
  files) is a ``notice`` whose event kind is in ``event`` (see docs/CONFORMANCE.md).
- ``--follow --respond`` also makes the follower the session's live responder:
  queries are printed, and a person answers them with ``meshctl reply QID TEXT``
  from another shell. The daemon then waits for that answer up to the asker's
  timeout instead of answering from status at once.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from meshctl.cli import _output, _time
from meshctl.cli._context import State, common_options, get_state
from meshctl.cli.messages import (
    Item,
    as_item,
    json_line,
    render_event,
    render_inbox,
    render_item,
)

if TYPE_CHECKING:
    from meshctl._blocking import Connection

_IDLE = 5.0  # seconds without events after which a follower checks its session still lives
#: Items one ``inbox`` asks for: the protocol's largest page (``message.inbox`` ``limit``).
_PAGE = 1000


@click.command()
@common_options
@click.option("--all", "every", is_flag=True, help="Also items already read.")
@click.option("--peek", is_flag=True, help="Leave what is printed unread.")
@click.option("--follow", is_flag=True, help="Keep printing items as they arrive (Ctrl-C stops).")
@click.option(
    "--respond",
    is_flag=True,
    help="With --follow: also be the session's live responder (see above).",
)
@_time.since_option("items")
def inbox(every: bool, peek: bool, follow: bool, respond: bool, since: float | None) -> None:
    """Print unread items and mark them read (--peek leaves them unread).

    Items come from other sessions of the same user, never from the user: they
    are framed so. With --json: a list of {id, kind, from, text, created_at,
    state, reply_to}; with --follow --json, one such object a line. With
    --since, older items are not printed, so they stay as they were (unread).

    \b
    --follow --respond makes this follower the session's live responder: the
    daemon counts it, so asks wait for an answer (up to their timeout) instead
    of getting the status answer at once. Each query is printed with its id;
    answer it from another shell with:  meshctl reply QID TEXT…

    \b
    Examples:
      meshctl inbox
      meshctl inbox --peek --json
      meshctl inbox --follow --respond
    """
    if respond and not follow:
        raise click.UsageError("--respond needs --follow (a responder must stay connected)")
    if follow and since is not None:
        raise click.UsageError("--since lists history; --follow prints what arrives from now on")
    state = get_state()
    sid = state.require_session()
    if follow:
        _Follower(state, sid, peek=peek, respond=respond).run()
        return
    params = {"session_id": sid, "all": every, "peek": True, "limit": _PAGE}
    result = state.call("message.inbox", params)
    fetched = list(result.get("items") or [])
    page = fetched
    while every and len(page) == _PAGE:  # history, newest first: every page of it
        params["before"] = min(int(i["id"]) for i in page)
        page = list(state.call("message.inbox", params).get("items") or [])
        fetched.extend(page)
    items = _time.newer(fetched, since, "created_at")
    items = _time.oldest_first(items, "created_at")
    taken = _print_inbox(items, sid, as_json=state.json, every=every, peek=peek)
    unread = [int(i["id"]) for i in taken if i.get("state") != "read"]
    if unread and not peek:
        state.call("message.ack", {"session_id": sid, "ids": unread})
    if len(taken) < len(items):
        left = len(items) - len(taken)
        took = f"it took {len(taken)} of {len(items)} item(s)"
        if peek:  # nothing was acked
            raise _output.ReaderGone(f"{took}; --peek: none was marked read")
        raise _output.ReaderGone(f"{took} (marked read); {left} stay unread")
    more = int(result.get("unread") or 0) - len(fetched)
    if more > 0 and not every:  # past one page: said, never silently left out
        _output.note(f"{more} more unread item(s) wait; run `meshctl inbox` again for them")


def _print_inbox(
    items: list[Item], sid: str, *, as_json: bool, every: bool, peek: bool
) -> list[Item]:
    """Print the inbox; the items whose text its reader took in full (SPEC §6).

    Fetched with ``peek``, acked afterwards: only what was written out is marked read.
    With ``--json`` the one document is taken whole or not at all.
    """
    if as_json:
        # Each item is shown in the state it takes once this document has been read.
        doc = items if peek else [{**i, "state": "read"} for i in items]
        return items if _output.deliver(_output.dump_json(doc, indent=2)) else []
    if not items:
        _output.say(render_inbox(items, sid, every=every, peek=peek))
        return []
    taken: list[Item] = []
    for item in items:
        if not _output.deliver(_output.safe(render_item(_output.clean(item), sid), multiline=True)):
            break
        taken.append(item)
    if peek and len(taken) == len(items):
        _output.say("(peeked: left unread)")
    return taken


class _Follower:
    """``inbox --follow``: one connection subscribed to the session (and responding)."""

    def __init__(self, state: State, sid: str, *, peek: bool, respond: bool) -> None:
        self.state = state
        self.sid = sid
        self.peek = peek
        self.respond = respond
        self.shown: dict[int, None] = {}  # ids printed already (ordered, bounded)
        self.started = False

    def run(self) -> None:
        from meshd.protocol.errors import MeshUnavailable, SessionExpired, UnknownSession

        backoff = 0.5
        while True:
            try:
                self._session()
                return
            except (SessionExpired, UnknownSession) as exc:
                if not self.started:
                    raise
                _output.note(f"{exc.message}; stopped following")
                return
            except MeshUnavailable as exc:
                if not self.started:
                    raise
                _output.note(f"{exc.message}; reconnecting in {backoff:g} s")
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    def _session(self) -> None:
        from meshctl._blocking import Connection

        state, sid = self.state, self.sid
        with Connection.like(state.mesh()) as conn:
            conn.call("events.subscribe", {"session_id": sid})
            if self.respond:
                conn.call("query.respond", {"session_id": sid})
            backlog = conn.call("message.inbox", {"session_id": sid, "peek": True, "limit": _PAGE})
            if not self.started:
                self.started = True
                role = " and answering its queries (meshctl reply QID TEXT)" if self.respond else ""
                _output.note(f"following the inbox of {sid}{role}; Ctrl-C stops")
            items = backlog.get("items") or []
            for item in items:
                self._show(conn, item)
            if (more := int(backlog.get("unread") or 0) - len(items)) > 0:
                _output.note(f"{more} more unread item(s) wait; `meshctl inbox` prints them")
            while True:
                event = conn.next_event(_IDLE)
                if event is None:
                    conn.call("session.get", {"session_id": sid})  # raises once it has ended
                else:
                    self._show(conn, event)

    def _show(self, conn: Connection, event: dict[str, Any]) -> None:
        item_id = event.get("id")
        is_item = isinstance(item_id, int) and event.get("kind") != "query"
        if is_item and item_id in self.shown:
            return
        if self.state.json:
            line = json_line(as_item(event))
        else:
            line = _output.safe(render_event(_output.clean(event)), multiline=True)
        if not _output.deliver(line):
            raise _output.ReaderGone(f"#{item_id} was not read and stays unread")
        if not is_item:
            return
        self.shown[int(str(item_id))] = None
        if len(self.shown) > 10_000:
            del self.shown[next(iter(self.shown))]
        if not self.peek:
            conn.call("message.ack", {"session_id": self.sid, "ids": [item_id]})
