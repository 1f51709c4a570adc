"""The tools' descriptions and JSON-schema parameters, per set (:mod:`.tools`).

``COMPACT_SCHEMAS`` is what a model sees by default, on every request: every word
costs tokens in every session, so descriptions say what the model cannot guess
and no more (the budget, 600 tokens for the set, is checked by the tests).
``FULL_SCHEMAS`` has one tool per action, with longer descriptions.
"""

from __future__ import annotations

from typing import Any


def _s(description: str, props: dict[str, Any], required: list[str]) -> tuple[str, dict[str, Any]]:
    params: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        params["required"] = required
    return description, params


_STR = {"type": "string"}
_RES = {
    "type": "array",
    "items": {"type": "string"},
    "description": "Resources: file paths (relative to your working folder, or absolute), "
    "or keys like repo:/path, branch:/repo:NAME, port:8080, res:NAME.",
}

FULL_SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    "mesh_sessions": _s(
        "List the other live AI sessions of your user (CLI, chats, cron jobs, workers): what "
        "each works on (task), where (folder, branch), its status and the files or "
        "resources it claims. Use before touching shared files or to find whom to ask.",
        {}, [],
    ),
    "mesh_ask": _s(
        "Ask another live session a short question and wait (bounded) for its answer. If it "
        "cannot answer in time, the mesh answers from what that session reported (status, "
        "task, claims). A late answer arrives in your inbox.",
        {
            "to": {**_STR, "description": "Session id from mesh_sessions."},
            "question": _STR,
            "wait_s": {"type": "number", "description": "Seconds to wait (default 10, max 60)."},
        },
        ["to", "question"],
    ),
    "mesh_reply": _s(
        "Answer a question (query id) or reply to a message (message id) that another "
        "session of your user sent you.",
        {"id": {"type": "integer"}, "text": _STR},
        ["id", "text"],
    ),
    "mesh_send": _s(
        "Send a short message to another live session of your user; it waits in its inbox. "
        "Give reply_to to answer one of its messages.",
        {"to": _STR, "text": _STR, "reply_to": {"type": "integer"}},
        ["text"],
    ),
    "mesh_broadcast": _s(
        "Send a short message to every other live session (or, with path, to those working "
        "there). collect=true gathers their answers for a few seconds.",
        {"text": _STR, "path": _STR, "collect": {"type": "boolean"}},
        ["text"],
    ),
    "mesh_claim": _s(
        "Claim files or resources so other sessions of your user are warned before touching "
        "them (advisory lock). Returns granted, or held with who holds it and why. Claims "
        "expire after ttl_s of inactivity (default 1800) and end with the session.",
        {"resources": _RES, "reason": _STR, "ttl_s": {"type": "number"}},
        ["resources"],
    ),
    "mesh_release": _s(
        "Release claims taken with mesh_claim (all of yours when resources is empty).",
        {"resources": _RES},
        [],
    ),
    "mesh_handoff": _s(
        "Leave a durable handoff note (what was done, what is next) for another session or "
        "for whoever continues this work.",
        {
            "summary": _STR,
            "to": {**_STR, "description": "Session id; omit for whoever comes next."},
            "files": {"type": "array", "items": _STR},
            "next_steps": {"type": "array", "items": _STR},
        },
        ["summary"],
    ),
    "mesh_inbox": _s(
        "Read messages, answers and notices other sessions of your user (or the mesh) sent "
        "you that you have not seen yet.",
        {}, [],
    ),
    "mesh_board": _s(
        "The project board your user's sessions share (project: the git repo of a path; "
        "default your working folder). action=changes: files other sessions changed "
        "recently; show: the whole board (progress, pitfalls, changes, who is there); "
        "post: add a progress line or a pitfall (kind) for the other sessions.",
        {
            "action": {"type": "string", "enum": ["changes", "show", "post"]},
            "path": _STR,
            "kind": {"type": "string", "enum": ["progress", "pitfall"]},
            "text": _STR,
        },
        [],
    ),
    "mesh_signal": _s(
        "Signals between your user's sessions: action=emit NAME (with an optional JSON "
        "payload) tells waiters something is ready; action=wait NAME waits (at most wait_s, "
        "default 10, max 60) for the newest signal after sequence number `after`.",
        {
            "action": {"type": "string", "enum": ["emit", "wait"]},
            "name": _STR,
            "payload": {"type": "object"},
            "after": {"type": "integer"},
            "wait_s": {"type": "number"},
        },
        ["action", "name"],
    ),
    "mesh_once": _s(
        "At-most-once guard for external side effects (sending an email, a payment, a "
        "deploy): action=reserve KEY before acting (status reserved: go ahead; reserved by "
        "you: your own, unfinished; running, done or unknown: another session did or is "
        "doing it, do NOT act); after acting, "
        "action=done KEY, or action=free KEY if it failed; action=list shows keys.",
        {
            "action": {"type": "string", "enum": ["reserve", "done", "free", "list"]},
            "key": _STR,
            "note": _STR,
        },
        ["action"],
    ),
    "mesh_notes": _s(
        "Your notebook on the mesh: action=add writes a note (shared with your user's other "
        "sessions, or private=true for yourself only; it outlives this session); "
        "action=list reads the notes you may see (author: one session's only).",
        {
            "action": {"type": "string", "enum": ["add", "list"]},
            "text": _STR,
            "private": {"type": "boolean"},
            "author": _STR,
        },
        ["action"],
    ),
}  # fmt: skip

_ID = {"type": "integer"}
_NUM = {"type": "number"}
_LIST = {"type": "array", "items": _STR}


def _act(*names: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(names)}


COMPACT_SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    "mesh_sessions": _s(
        "Your user's other live AI sessions: task, folder, branch, status, claims.",
        {}, [],
    ),
    "mesh_ask": _s(
        "Ask a live session; waits wait_s (10) for its answer, else its status answers.",
        {"to": _STR, "question": _STR, "wait_s": _NUM},
        ["to", "question"],
    ),
    "mesh_msg": _s(
        "Messages between your user's sessions: send text to a session, reply to a "
        "question or message id, or read your inbox.",
        {"action": _act("send", "reply", "inbox"), "to": _STR, "id": _ID, "text": _STR},
        ["action"],
    ),
    "mesh_claim": _s(
        "Advisory claim on files or keys (port:8080, res:NAME) so other sessions are "
        "warned: granted, or held (by whom, why).",
        {"action": _act("claim", "release"), "resources": _LIST, "reason": _STR},
        ["resources"],
    ),
    "mesh_notes": _s(
        "Notes that outlive this session, shared with your user's sessions (private: "
        "yours only).",
        {"action": _act("add", "list"), "text": _STR, "private": {"type": "boolean"}},
        ["action"],
    ),
    "mesh_signal": _s(
        "emit NAME to wake sessions waiting for it; wait NAME for one after seq `after`.",
        {"action": _act("emit", "wait"), "name": _STR, "payload": {"type": "object"},
         "after": _ID, "wait_s": _NUM},
        ["action", "name"],
    ),
    "mesh_once": _s(
        "At most once for side effects (email, payment, deploy): reserve KEY and act only "
        "if reserved (or reserved by you); then done, or free if it failed.",
        {"action": _act("reserve", "done", "free", "list"), "key": _STR, "note": _STR},
        ["action"],
    ),
}  # fmt: skip
