"""``/mesh``: the in-session slash command (CLI, TUI and gateway).

Hermes owns ``/sessions`` and ``/handoff``, so the mesh has one command with
subcommands (SPEC §11): ``/mesh sessions|ask|sync|handoff|claim|release|broadcast|inbox``.
The handler is async and runs the blocking client in a worker thread: in the gateway
it is awaited on the event loop, which must never block on a socket.
"""

from __future__ import annotations

import json
from typing import Any

from . import _client, _private, _text
from ._common import GATEWAY_MESSAGE, gateway_session
from ._tools import Tools, framed_sessions

USAGE = (
    "usage: /mesh sessions | ask ID QUESTION | sync | inbox | claim RES... | release [RES...] "
    "| broadcast TEXT | handoff TEXT | help"
)
HELP = """/mesh — Session Mesh: the other live AI sessions of your user
  /mesh sessions          who else is working, on what, where, holding what (also: /mesh ls)
  /mesh sync              you, your claims, the others, and your unread inbox
  /mesh ask ID QUESTION   ask another session; its answer (or its status) comes back
  /mesh inbox             messages and answers other sessions sent you
  /mesh claim RES...      claim files or keys (res:NAME, port:8080) so others are warned
  /mesh release [RES...]  release them (all of yours without RES)
  /mesh broadcast TEXT    tell every other live session
  /mesh handoff TEXT      leave a note for whoever continues this work
  /mesh help              this text
The model has the mesh_* tools; `meshctl` does all of this from a terminal."""


def calling_session(tools: Tools) -> str:
    """The session this command is typed in: the gateway chat's (from the message being
    handled), the CLI's, else the last one seen by hooks."""
    return (
        gateway_session(GATEWAY_MESSAGE.get())
        or _private.cli_session_id()
        or tools.rt.last_session
        or ""
    )


def run(tools: Tools, raw: str) -> str:
    """One ``/mesh`` command, synchronously: the text shown to the person."""
    words = raw.split()
    sub = words[0].lower() if words else "sessions"
    rest = raw.strip()[len(words[0]) :].strip() if words else ""
    if sub == "help":
        return HELP
    sid = calling_session(tools)
    if not tools.rt.link.available():
        return tools.rt.link.advice()  # not running, or running and not answering
    call = tools.handler
    if sub in ("sessions", "ls"):
        doc = json.loads(call("mesh_sessions")({}, session_id=sid))
        return doc.get("error") or framed_sessions(doc, sid)
    if sub == "ask" and len(words) >= 3:
        q = rest[len(words[1]) :].strip()
        doc = json.loads(call("mesh_ask")({"to": words[1], "question": q}, session_id=sid))
        return doc.get("error") or f"{_text.sender_label(words[1])} {doc.get('answer')}"
    if sub == "sync":
        return _sync(tools, sid)
    if sub == "inbox":
        doc = json.loads(call("mesh_inbox")({}, session_id=sid))
        items = doc.get("items") or []
        return doc.get("error") or (
            "\n".join(_text.item_line(i, tools.mode) for i in items) or "Inbox: empty."
        )
    tool = {"claim": "mesh_claim", "release": "mesh_release", "broadcast": "mesh_broadcast",
            "handoff": "mesh_handoff"}.get(sub)  # fmt: skip
    if tool is None or (sub != "release" and not rest):
        return USAGE
    args: Any = {
        "mesh_claim": {"resources": words[1:]},
        "mesh_release": {"resources": words[1:]},
        "mesh_broadcast": {"text": rest},
        "mesh_handoff": {"summary": rest},
    }[tool]
    return said(tool, json.loads(call(tool)(args, session_id=sid)))


def said(tool: str, doc: dict[str, Any]) -> str:
    """A tool's JSON as the sentence ``meshctl`` would print: a person typed the command."""
    if doc.get("error"):
        return f"Session Mesh: {doc['error']}"
    if tool == "mesh_claim":
        claims = _client.claims_text()
        granted = doc.get("status") == "granted"
        return str(claims.granted_line(doc) if granted else claims.held_lines(doc))
    if tool == "mesh_release":
        released = [str(r) for r in doc.get("released") or []]
        return "released " + ", ".join(released) if released else "nothing to release"
    if tool == "mesh_broadcast":
        sent = [str(r) for r in doc.get("recipients") or []]
        if not sent:
            return "no other live session to send it to"
        return f"sent to {len(sent)} session{'s' if len(sent) > 1 else ''}: " + ", ".join(sent)
    to = f" for {doc['to']}" if doc.get("to") else ""
    return f"handoff #{doc.get('id')}{to} saved"


def _sync(tools: Tools, sid: str) -> str:
    doc = json.loads(tools.handler("mesh_sessions")({}, session_id=sid))
    if doc.get("error"):
        return str(doc["error"])
    inbox = json.loads(tools.handler("mesh_inbox")({}, session_id=sid))
    lines = [
        f"Session Mesh — you are {sid} (profile {doc.get('profile')})",
        _own_claims(tools, sid),
        framed_sessions(doc, sid),
    ]
    items = inbox.get("items") or []
    lines.append(
        "\n".join(_text.item_line(i, tools.mode) for i in items)
        if items
        else "Inbox: nothing unread."
    )
    return "\n".join(lines)


def _own_claims(tools: Tools, sid: str) -> str:
    """The caller's own claims, one line (what it holds, why, and for how long)."""
    listed = tools.rt.link.call("claim.list", {"session_id": sid})
    claims = [c for c in (listed or {}).get("claims") or [] if isinstance(c, dict)]
    if not claims:
        return "Your claims: none."
    shown = []
    for c in claims:
        why = f" — {c['reason']}" if c.get("reason") else ""
        left = c.get("expires_in_s")
        ttl = f" (expires in {int(left) // 60} min)" if isinstance(left, int | float) else ""
        shown.append(f"{c.get('resource')}{why}{ttl}")
    return "Your claims: " + "; ".join(shown)


def handler(tools: Tools) -> Any:
    """The async handler Hermes registers for ``/mesh``."""

    async def mesh_command(raw_args: str = "") -> str:
        import asyncio  # Hermes has it loaded by the time a command runs

        return await asyncio.to_thread(run, tools, raw_args or "")

    return mesh_command
