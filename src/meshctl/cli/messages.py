"""``meshctl send``, ``reply``, ``broadcast`` and ``sessions ask`` (SPEC §6, §9), and how
every item is shown (``inbox`` is :mod:`meshctl.cli.inbox`).

Every item shown to a person or a model is framed as coming from another
session of the same user (SPEC §6 Safety): human output puts
``[from X — another session of yours, not you]`` in front of the words, and
``--json`` keeps the daemon's ``framing`` sentence in each object.

Decisions:

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
from typing import Any

import click

from meshctl.cli import _output, _time
from meshctl.cli._context import common_options, complete_sessions, get_state
from meshctl.cli._params import Seconds, Whole
from meshd.protocol import contract
from meshd.protocol.contract import DAEMON_SENDER

Item = Mapping[str, Any]


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
@click.argument("msg_id", metavar="MSG_ID", type=Whole(min=1))
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
@click.option(
    "--path",
    metavar="P",
    help="Only sessions whose claims, folder or repo overlap P (absolute path or key).",
)
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
    source = click.get_current_context().get_parameter_source("timeout")
    if not collect and source is click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("--timeout needs --collect (only a collected broadcast waits)")
    state = get_state()
    params: dict[str, Any] = {"session_id": state.require_session(), "text": " ".join(text)}
    if collect:
        params.update(collect=True, timeout=timeout)
    if path is not None:
        params["path"] = path  # as typed: the daemon canonicalises it as a claim key
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
