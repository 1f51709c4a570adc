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
from ._runtime import GATEWAY_MESSAGE, gateway_session
from ._tools import Tools, framed_sessions

USAGE = (
    "usage: /mesh sessions | ask ID QUESTION | sync | inbox | claim RES... | release [RES...] "
    "| broadcast TEXT | handoff TEXT"
)


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
    sid = calling_session(tools)
    if not tools.rt.link.available():
        return "Session Mesh: meshd is not reachable (start it with `meshctl daemon start`)."
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
        framed_sessions(doc, sid),
    ]
    items = inbox.get("items") or []
    lines.append(
        "\n".join(_text.item_line(i, tools.mode) for i in items)
        if items
        else "Inbox: nothing unread."
    )
    return "\n".join(lines)


def handler(tools: Tools) -> Any:
    """The async handler Hermes registers for ``/mesh``."""

    async def mesh_command(raw_args: str = "") -> str:
        import asyncio  # Hermes has it loaded by the time a command runs

        return await asyncio.to_thread(run, tools, raw_args or "")

    return mesh_command
