"""``meshctl sync``: the one screen a session reads before risky work (SPEC §9).

Three questions, three calls: who is live and what they hold (``session.list``,
claims included), what waits in my inbox (``message.inbox`` with ``peek``: the
items are shown, not marked read -- ``meshctl inbox`` reads them), and which
handoffs are for me (``handoff.list``: addressed to me, or unaddressed ones
left by other sessions).

``--json`` prints ``{"session_id", "profile", "sessions", "inbox", "unread",
"handoffs"}``: the sessions as ``sessions active --json`` has them, the inbox
items as ``inbox --json``, the handoffs as ``handoff list --json``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from meshctl.cli import _output, _time
from meshctl.cli._context import State, common_options, get_state
from meshctl.cli.handoff import summary_line
from meshctl.cli.messages import render_item
from meshd.protocol.errors import MethodNotFound

Doc = Mapping[str, Any]
MAX_HANDOFFS = 10


def for_me(handoffs: Sequence[Doc], sid: str) -> list[Doc]:
    """Handoffs addressed to ``sid``, or to nobody and written by another session."""
    return [h for h in handoffs if h.get("to") == sid or (not h.get("to") and h.get("from") != sid)]


def _claim_line(claim: Doc) -> str:
    reason = f" — {claim['reason']}" if claim.get("reason") else ""
    since = f", since {_time.ago(claim['since'])}" if claim.get("since") else ""
    local = ", local-only" if claim.get("local_only") else ""
    mode = claim.get("mode", "exclusive")
    return f"    holds {claim.get('resource')} ({mode}{local}{since}){reason}"


def render_sync(doc: Doc, home: str | None = None) -> str:
    """The human screen of ``meshctl sync``."""
    from meshctl.cli.sessions import describe

    sid = str(doc["session_id"])
    sessions = list(doc.get("sessions") or [])
    others = [s for s in sessions if s.get("session_id") != sid]
    hosts = len({s.get("host") for s in sessions}) > 1  # a fleet: as `sessions active`
    lines = [f"Sync for {sid} (profile {doc.get('profile')}):", ""]
    lines.append(f"Live sessions ({len(others) or 'none'} besides you):")
    for s in sessions:
        line = describe(s, home, host=hosts)
        lines.append(line + ("  (you)" if s.get("session_id") == sid else ""))
        lines.extend(_claim_line(c) for c in s.get("claims") or [])
    items = list(doc.get("inbox") or [])
    lines.append("")
    if items:
        lines.append(f"Inbox: {doc.get('unread', len(items))} unread (shown, not marked read):")
        lines.extend(render_item(i, sid) for i in items)
    else:
        lines.append("Inbox: nothing unread.")
    handoffs = list(doc.get("handoffs") or [])
    lines.append("")
    if handoffs:
        lines.append("Handoffs for you:")
        if len(handoffs) > MAX_HANDOFFS:
            lines.append(f"  … {len(handoffs) - MAX_HANDOFFS} older: meshctl handoff list")
        lines.extend(summary_line(h, me=sid) for h in handoffs[-MAX_HANDOFFS:])
    else:
        lines.append("Handoffs for you: none.")
    deferred = list(doc.get("deferred_jobs") or [])
    if deferred:
        lines.append("")
        lines.append("Critical jobs NOT RUN since their last success (meshctl jobs):")
        for job in deferred:
            last = (job.get("pending") or [{}])[-1]
            who = ", ".join(
                f"{h.get('session_id')} on {h.get('resource')}" for h in last.get("holders") or []
            )
            times = len(job.get("pending") or [])
            said = f"{times} time" if times == 1 else f"{times} times"
            lines.append(f"  {job.get('name')}: deferred {said}, last held by {who or '?'}")
    return "\n".join(lines)


def deferred_jobs(state: State) -> list[Doc]:
    """Critical jobs whose deferrals are pending (never silent); none from an older meshd."""
    try:
        radar = state.call("job.list", {})
    except MethodNotFound:
        return []
    return [j for j in radar.get("jobs") or [] if j.get("pending")]


@click.command()
@common_options
def sync() -> None:
    """Who is live, what they hold, what waits in my inbox, handoffs for me.

    Read it before risky work. Inbox items are shown, not marked read; what
    other sessions wrote comes from them, not from the user.

    \b
    Examples:
      meshctl sync
      meshctl sync --json
    """
    state = get_state()
    sid = state.require_session()
    listed = state.call("session.list")
    inbox = state.call("message.inbox", {"session_id": sid, "peek": True})
    handoffs = state.call("handoff.list", {"session_id": sid})
    doc = {
        "session_id": sid,
        "profile": listed.get("profile") or state.profile,
        "sessions": list(listed.get("sessions") or []),
        "inbox": list(inbox.get("items") or []),
        "unread": inbox.get("unread", 0),
        "handoffs": _time.oldest_first(for_me(handoffs.get("handoffs") or [], sid), "created_at"),
        "deferred_jobs": deferred_jobs(state),
    }
    _output.emit(state.json, doc, lambda: render_sync(_output.clean(doc)))
