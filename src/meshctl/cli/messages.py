"""``meshctl send``, ``inbox``, ``reply``, ``broadcast`` and ``sessions ask`` (SPEC §6, §9).

Every item shown to a person or a model is framed as coming from another
session of the same user (SPEC §6 Safety): human output puts
``[from X — another session of yours, not you]`` in front of the words, and
``--json`` keeps the daemon's ``framing`` sentence in each object.

Decisions:

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
- ``reply ID`` answers the open query ``ID`` when there is one, else sends a
  message in reply to message ``ID`` (ids of messages and queries share one
  sequence, so the id names one thing).
- ``sessions ask`` exits 0 when answered (live or by status), 75 when the live
  responder did not answer in time (the status answer is still printed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from meshctl.cli import _output, _time
from meshctl.cli._context import State, common_options, complete_sessions, get_state
from meshctl.cli._params import Seconds
from meshd.protocol import contract
from meshd.protocol.contract import DAEMON_SENDER

if TYPE_CHECKING:
    from meshctl._blocking import Connection

Item = Mapping[str, Any]

_IDLE = 5.0  # seconds without events after which a follower checks its session still lives


# --- rendering (pure) -------------------------------------------------------------------


def label(sender: str, me: str | None = None) -> str:
    """The frame in front of another session's words (same text as the library's).

    What ``me`` (the session reading) wrote itself is labelled as its own.
    """
    if me is not None and sender == me:
        return "[written by this session]"
    return contract.label(sender)


def indent(text: str, prefix: str = "    ") -> str:
    """Every line of ``text`` indented (empty text: one indented empty line)."""
    return "\n".join(prefix + line for line in (text.splitlines() or [""]))


def _what(item: Item) -> str:
    kind = str(item.get("kind") or "message")
    reply_to = item.get("reply_to")
    if kind == "answer":
        return f"late answer to your query #{reply_to}" if reply_to else "late answer"
    if kind == "query":
        request = item.get("request") or "question"
        what = {"handoff": "asks for a handoff", "broadcast": "collected broadcast"}
        head = what.get(str(request), "query")
        return f"{head} (answer with: meshctl reply {item.get('id')} TEXT)"
    return f"{kind}, reply to #{reply_to}" if reply_to else kind


def render_item(item: Item, me: str | None = None) -> str:
    """One inbox item or pushed query: framed header line, then the text indented."""
    when = f", {_time.ago(item['created_at'])}" if item.get("created_at") else ""
    number = f"#{item['id']} " if item.get("id") is not None else ""  # a pushed notice has none
    head = f"{number}{label(str(item.get('from', '?')), me)} {_what(item)}{when}:"
    return f"{head}\n{indent(str(item.get('text', '')))}"


def render_inbox(items: list[Item], session_id: str, *, every: bool, peek: bool) -> str:
    """``meshctl inbox`` for people."""
    if not items:
        return f"No {'' if every else 'unread '}items for {session_id}."
    text = "\n".join(render_item(i, session_id) for i in items)
    if peek:
        text += "\n(peeked: left unread)"
    return text


def render_event(event: Item) -> str:
    """A pushed event in ``inbox --follow``: items and queries framed, notices as such."""
    kind = str(event.get("kind", "event"))
    if kind.startswith("claim.") and event.get("text"):  # a loss: its inbox notice's words
        return f"{label(DAEMON_SENDER)} {event['text']}"
    if kind == "query" or "text" in event:
        return render_item(event)
    text = f"{label(DAEMON_SENDER)} {kind.replace('.', ' ')}"
    if resources := event.get("resources"):
        text += " " + ", ".join(str(r) for r in resources)
    if event.get("token") is not None:
        text += f" (token {event['token']})"
    said = kind.rpartition(".")[2]  # "claim.released": its how (released) is said already
    for key, word in (("how", ""), ("by", "by "), ("reason", "— ")):
        if event.get(key) and not (key == "how" and event[key] == said):
            text += f" {word}{event[key]}"
    return text


def render_answer(result: Item, to: str) -> str:
    """``sessions ask`` for people: who answered, how, and the framed answer."""
    sender = str(result.get("from") or to)
    took = f"{float(result.get('elapsed_s') or 0):.2f} s"
    if result.get("timed_out"):
        how = (
            f"timed out after {took}: {sender}'s live responder did not answer in time; "
            f"status answer from what {sender} reported"
        )
    elif result.get("answered_by") == "session":
        how = f"answered live by {sender} in {took}"
    else:
        how = f"answered by the status responder ({sender} has no live responder)"
    return f"{label(sender)} {how}:\n{indent(str(result.get('answer', '')))}"


def render_broadcast(result: Item) -> str:
    """``broadcast`` for people: who got it, who was skipped, and collected answers."""
    recipients = [str(r) for r in result.get("recipients") or []]
    if recipients:
        n = len(recipients)
        lines = [f"Sent to {n} session{'' if n == 1 else 's'}: {_output.few(recipients)}."]
    else:
        lines = ["No other live session to broadcast to."]
    for sid, why in (result.get("skipped") or {}).items():
        lines.append(f"Skipped {sid}: {why}.")
    for answer in result.get("answers") or []:
        lines.append(render_answer(answer, str(answer.get("from", "?"))))
    return "\n".join(lines)


def json_line(obj: Any) -> str:
    """One compact JSON object on one line (``inbox --follow --json``)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)


ITEM_KINDS = frozenset({"message", "query", "answer", "handoff", "notice", "broadcast"})
"""The ``kind`` of an inbox item (SPEC §9 ``inbox --json``)."""


def as_item(event: Item) -> dict[str, Any]:
    """A pushed event in the inbox item shape, for ``inbox --follow --json`` (SPEC §9:
    "one such object a line"). Items and queries pass as they are; any other event (a
    claim loss, a preemption, a granted wait, changed files) is a ``notice`` whose own
    kind moves to ``event``, with every item field present, so a script reads one
    shape: the same item id is ``notice`` here and in ``inbox --json``."""
    out = dict(event)
    kind = str(out.get("kind", ""))
    if kind not in ITEM_KINDS:
        out["kind"], out["event"] = "notice", kind
        out.setdefault("from", DAEMON_SENDER)
        if not out.get("created_at"):
            out["created_at"] = out.get("at") or contract.rfc3339(time.time())
        if not out.get("text"):
            out["text"] = render_event(event).removeprefix(label(DAEMON_SENDER)).strip()
    for key, default in (("id", None), ("state", None), ("reply_to", None)):
        out.setdefault(key, default)
    return out


# --- send / reply -----------------------------------------------------------------------


@click.command()
@common_options
@click.argument("to", metavar="ID", shell_complete=complete_sessions)
@click.argument("text", metavar="TEXT…", nargs=-1, required=True)
def send(to: str, text: tuple[str, ...]) -> None:
    """Send a durable message to session ID; it waits in their inbox.

    The words are joined with spaces; `-` alone reads the text from stdin. The
    receiver sees it framed as coming from another session of the same user, not
    from the user.

    \b
    Examples:
      meshctl send cli:20261129-1f3a9c 'tests on main are red, do not merge'
      pytest -q 2>&1 | tail -5 | meshctl send cli:20261129-1f3a9c -
    """
    state = get_state()
    params = {"session_id": state.require_session(), "to": to, "text": _output.words(text)}
    result = state.call("message.send", params)
    where = f" on host {result['host']}" if result.get("host") else ""
    _output.emit(
        state.json,
        result,
        f"Sent #{result.get('id')} to {result.get('to')}{where} ({result['state']}).",
    )


@click.command()
@common_options
@click.argument("msg_id", metavar="MSG_ID", type=click.IntRange(min=1))
@click.argument("text", metavar="TEXT…", nargs=-1, required=True)
def reply(msg_id: int, text: tuple[str, ...]) -> None:
    """Answer query MSG_ID, or reply to message MSG_ID.

    An open query (shown by `inbox --follow --respond`) is answered (at most
    2 KiB); an answer after the asker stopped waiting goes to its inbox. Any
    other id is taken as a message to reply to: the reply goes to its sender.

    \b
    Examples:
      meshctl reply 42 'yes, I am done with the db'
    """
    from meshd.protocol.errors import NotFound

    state = get_state()
    sid, body = state.require_session(), " ".join(text)
    try:
        result = state.call("query.answer", {"session_id": sid, "query_id": msg_id, "text": body})
    except NotFound:
        pass
    else:
        doc = {"kind": "answer", **result}
        _output.emit(state.json, doc, _answered(result))
        return
    try:
        sent = state.call("message.send", {"session_id": sid, "reply_to": msg_id, "text": body})
    except NotFound as exc:
        raise _output.Failure(
            f"#{msg_id} is neither an open query for {sid} nor a message to reply to",
            "NOT_FOUND",
            code=exc.code,
            data={"id": msg_id},
            hint="see the ids with `meshctl inbox --all`; a query can be answered only "
            "while its asker waits (and shortly after)",
        ) from exc
    doc = {"kind": "message", **sent}
    text_out = (
        f"Replied to #{msg_id}: sent #{sent.get('id')} to {sent.get('to')} ({sent['state']})."
    )
    _output.emit(state.json, doc, text_out)


def _answered(result: Item) -> str:
    qid = result.get("query_id")
    if result.get("late"):
        return (
            f"Answered query #{qid} late: the asker had stopped waiting, so it went to "
            f"their inbox as #{result.get('message_id')}."
        )
    return f"Answered query #{qid}."


# --- inbox ------------------------------------------------------------------------------


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
    result = state.call("message.inbox", {"session_id": sid, "all": every, "peek": True})
    items = _time.newer(result.get("items") or [], since, "created_at")
    items = _time.oldest_first(items, "created_at")
    taken = _print_inbox(items, sid, as_json=state.json, every=every, peek=peek)
    unread = [int(i["id"]) for i in taken if i.get("state") != "read"]
    if unread and not peek:
        state.call("message.ack", {"session_id": sid, "ids": unread})
    if len(taken) < len(items):
        left = len(items) - len(taken)
        took = f"it took {len(taken)} of {len(items)} item(s) (marked read)"
        raise _output.ReaderGone(f"{took}; {left} stay unread")


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
            backlog = conn.call("message.inbox", {"session_id": sid, "peek": True})
            if not self.started:
                self.started = True
                role = " and answering its queries (meshctl reply QID TEXT)" if self.respond else ""
                _output.note(f"following the inbox of {sid}{role}; Ctrl-C stops")
            for item in backlog.get("items") or []:
                self._show(conn, item)
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


# --- ask / broadcast --------------------------------------------------------------------

_TIMEOUT = Seconds(open_min=True)


@click.command()
@common_options
@click.argument("to", metavar="ID", shell_complete=complete_sessions)
@click.argument("question", metavar="QUESTION…", nargs=-1, required=True)
@click.option(
    "--timeout", type=_TIMEOUT, default=10.0, show_default=True, metavar="S", help="Wait at most S."
)
def ask(to: str, question: tuple[str, ...], timeout: float) -> int:
    """Ask session ID a bounded question; print who answered and what.

    Its live responder answers when it has one; otherwise the mesh answers at
    once from what ID reported (status, task, folder, claims, last handoff).
    Exit 0 when answered, 75 when the live responder did not answer within the
    timeout (the status answer is printed instead).

    \b
    Examples:
      meshctl sessions ask cli:20261129-1f3a9c 'are you still using res:db?' --timeout 30
    """
    state = get_state()
    params = {
        "session_id": state.require_session(),
        "to": to,
        "question": " ".join(question),
        "timeout": timeout,
    }
    from meshctl.cli._waiting import ran_out, session_detail, waiting

    shown = min(timeout, state.mesh().query_cap())  # the daemon waits no longer (SPEC §2)
    with waiting(f"asking {_output.safe(to)}", shown, session_detail(state.mesh(), to)):
        result = state.call("query.ask", params, timeout=timeout + state.mesh().timeout)
    if result.get("timed_out") and state.json:  # for people, the answer's head says it
        what = f"{to} did not answer; the answer is from what {to} reported"
        ran_out(timeout, what, result.get("elapsed_s"))
    _output.hand_over(
        state.json,
        result,
        lambda: render_answer(_output.clean(result), _output.clean(to)),
        "the answer was not read, and answers given within an ask are not kept; ask again",
    )
    return _output.EXIT_TEMPFAIL if result.get("timed_out") else _output.EXIT_OK


@click.command()
@common_options
@click.argument("text", metavar="TEXT…", nargs=-1, required=True)
@click.option("--collect", is_flag=True, help="Gather answers until the timeout.")
@click.option(
    "--timeout",
    type=_TIMEOUT,
    default=10.0,
    show_default=True,
    metavar="S",
    help="With --collect: wait at most S.",
)
@click.option("--path", metavar="P", help="Only sessions whose claims, folder or repo overlap P.")
def broadcast(text: tuple[str, ...], collect: bool, timeout: float, path: str | None) -> None:
    """Send a message to every other live session (or those working on --path).

    With --collect each is asked instead, and the answers are printed; the
    silent ones are answered by the status responder. Counts once against the
    message budget.

    \b
    Examples:
      meshctl broadcast 'rebasing main in 5 min'
      meshctl broadcast 'who uses port 8080?' --collect --timeout 30
    """
    state = get_state()
    params: dict[str, Any] = {"session_id": state.require_session(), "text": " ".join(text)}
    if collect:
        params.update(collect=True, timeout=timeout)
    if path is not None:
        from meshctl import _claims

        params["path"] = _claims.resolve(path)
    waited = (timeout if collect else 0) + state.mesh().timeout
    if not collect:
        result = state.call("broadcast.send", params, timeout=waited)
        _output.emit(state.json, result, lambda: render_broadcast(_output.clean(result)))
        return
    from meshctl.cli._waiting import others_detail, ran_out, waiting

    detail = None if path is not None else others_detail(state.mesh(), params["session_id"])
    shown = min(timeout, state.mesh().query_cap())  # the daemon waits no longer (SPEC §2)
    with waiting("collecting answers to the broadcast", shown, detail):
        result = state.call("broadcast.send", params, timeout=waited)
    silent = [a for a in result.get("answers") or [] if a.get("timed_out")]
    if silent:
        who = ", ".join(str(a.get("from")) for a in silent)
        took = max((a.get("elapsed_s") or 0 for a in silent), default=None)
        ran_out(timeout, f"no live answer from {who} (their status answers it)", took)
    human = lambda: render_broadcast(_output.clean(result))  # noqa: E731
    lost = "the collected answers were not read, and they are not kept; ask again"
    _output.hand_over(state.json, result, human, lost)
