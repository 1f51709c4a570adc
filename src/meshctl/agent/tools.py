"""The mesh tools, once for every frontend: name, description, parameters, handler.

Two sets (:func:`tools_for`):

- ``compact``, the default: seven tools for the everyday cases -- who is here and
  what they hold (``mesh_sessions``), ask (``mesh_ask``), send, reply and read
  (``mesh_msg``), claim and release (``mesh_claim``), notes, signals, at most once.
  At most 600 tokens as a model receives them (:func:`cost`), on every request of
  every session, whether the mesh is used or not.
- ``full``: the thirteen tools, one per action, with longer descriptions (handoff,
  broadcast and the board too), about 1.5k tokens.

A handler is ``handler(ctx, args) -> str``: the JSON text the model reads. It
never raises: a daemon that is down gives ``{"error": "the mesh daemon is
unreachable…"}``, a refusal ``{"error": …, "code": …}``, bad arguments
``{"error": "bad arguments: …"}``. Whatever the frontend's
:meth:`~.context.Context.arrived` returns is appended after the JSON.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .advice import FRAMING
from .context import Context, Refused

Handler = Callable[[Context, dict[str, Any]], str]
Doc = dict[str, Any]
#: The tool sets, default first.
MODES = ("compact", "full")
#: Default ttl (seconds) of a claim taken through a tool: refreshed while the session is
#: active (by frontends that can), so an idle chat does not hold a repo for days.
CLAIM_TTL = 1800.0
MAX_WAIT = 60.0
UNREACHABLE = "the mesh daemon is unreachable; try again later"
_KINDS = ("file", "repo", "branch", "port", "cron", "gateway", "account", "box", "skill", "res")


@dataclass(frozen=True)
class Tool:
    """One tool: what the model sees (name, description, parameters) and its handler.

    ``method``: the daemon method the tool needs; a frontend leaves the tool out when
    the daemon does not serve it (an older daemon). None: every daemon does.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler
    method: str | None = None


def schema(tool: Tool) -> dict[str, Any]:
    """The tool in OpenAI function format (what Hermes's ``register_tool`` takes)."""
    return {"name": tool.name, "description": tool.description, "parameters": tool.parameters}


def cost(tools: list[Tool]) -> int:
    """Tokens the tools cost a model request: JSON characters / 4 of their definitions as
    sent (``{"type": "function", "function": …}``, compact separators)."""
    sent = [{"type": "function", "function": schema(t)} for t in tools]
    return len(json.dumps(sent, ensure_ascii=False, separators=(",", ":"))) // 4


def tools_for(mode: str = "compact") -> list[Tool]:
    """The tool set for ``mode`` (:data:`MODES`; anything else: the compact set)."""
    return list(FULL if mode == "full" else COMPACT)


def run(ctx: Context, name: str, args: Mapping[str, Any] | None, mode: str = "full") -> str:
    """Call tool ``name`` (looked up in ``mode``'s set, then in the other)."""
    for tool in (*tools_for(mode), *FULL, *COMPACT):
        if tool.name == name:
            return tool.handler(ctx, dict(args or {}))
    return _dump({"error": f"no mesh tool named {name!r}"})


# --- handlers -------------------------------------------------------------------------


def _dump(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=False, default=str)


def _tool(fn: Callable[[Context, Doc], Any]) -> Handler:
    """A handler from a function returning the answer (None: daemon unreachable)."""

    def handle(ctx: Context, args: dict[str, Any]) -> str:
        try:
            doc = fn(ctx, args)
        except Refused as exc:
            doc = {"error": exc.message, "code": exc.code or None}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            doc = {"error": f"bad arguments: {exc!r}"}
        if doc is None:
            doc = {"error": UNREACHABLE}
        text = _dump(doc)
        news = ctx.arrived()
        return f"{text}\n\n{news}" if news else text

    handle.__name__ = fn.__name__
    return handle


def _framed(doc: Any, when: bool = True) -> Any:
    """``doc`` with the framing sentence, when it carries other sessions' words."""
    return {**doc, "framing": FRAMING} if isinstance(doc, dict) and when else doc


def _compact(doc: Any) -> Any:
    """A claim answer without its empty fields (``deadlock: false``, ``stolen: []``, …)."""
    if not isinstance(doc, Mapping):
        return doc
    return {k: v for k, v in doc.items() if k == "status" or v not in (None, False, "", [], {})}


def resolve(resource: str, cwd: str) -> str:
    """A claim key with relative paths made absolute against ``cwd``."""
    kind, sep, value = resource.partition(":")
    if sep and kind in _KINDS:
        if kind in ("file", "repo") and value and not value.startswith("/"):
            return f"{kind}:{os.path.normpath(os.path.join(cwd, value))}"
        return resource
    if sep and kind in ("memory", "ui"):
        return resource
    return os.path.normpath(os.path.join(cwd, os.path.expanduser(resource)))


def _session_doc(s: Mapping[str, Any]) -> Doc:
    keep = ("session_id", "source", "status", "task", "cwd", "branch", "model", "age_s", "stale",
            "last_activity", "parent", "kanban_task")  # fmt: skip
    doc = {k: s[k] for k in keep if s.get(k) not in (None, "", [])}
    doc["claims"] = [c.get("resource") for c in s.get("claims") or [] if isinstance(c, Mapping)]
    return doc


def _wait(args: Doc, default: float = 10.0, least: float = 0.1) -> float:
    return min(max(float(args.get("wait_s") or default), least), MAX_WAIT)


def sessions(ctx: Context, args: Doc) -> Any:
    result = ctx.call("session.list", {})
    if result is None:
        return None
    me = ctx.session_id
    others = [_session_doc(s) for s in result.get("sessions") or [] if s.get("session_id") != me]
    doc = {"you": me, "profile": result.get("profile"), "sessions": others}
    return _framed(doc, bool(others))  # their tasks are their words


def ask(ctx: Context, args: Doc) -> Any:
    wait = _wait(args)
    params = {"session_id": ctx.session_id, "to": str(args["to"]),
              "question": str(args["question"]), "timeout": wait}  # fmt: skip
    result = ctx.call("query.ask", params, timeout=wait + 2.0)
    return None if result is None else {**result, "framing": result.get("framing") or FRAMING}


def reply(ctx: Context, args: Doc) -> Any:
    target, text, me = int(args["id"]), str(args["text"]), ctx.session_id
    try:
        return ctx.call("query.answer", {"session_id": me, "query_id": target, "text": text})
    except Refused as exc:
        if exc.code != "NOT_FOUND":
            raise
    asker = ctx.asker(target)
    if asker is not None:  # the ask is over: the answer goes to the asker's inbox
        late = f"(answer to your question #{target}) {text}"
        return ctx.call("message.send", {"session_id": me, "to": asker, "text": late})
    return ctx.call("message.send", {"session_id": me, "reply_to": target, "text": text})


def send(ctx: Context, args: Doc) -> Any:
    params: Doc = {"session_id": ctx.session_id, "text": str(args["text"])}
    if args.get("to"):
        params["to"] = str(args["to"])
    if args.get("reply_to") is not None:
        params["reply_to"] = int(args["reply_to"])
    return ctx.call("message.send", params)


def inbox(ctx: Context, args: Doc) -> Any:
    result = ctx.call("message.inbox", {"session_id": ctx.session_id, "peek": True})
    if result is None:
        return None
    items = [i for i in result.get("items") or [] if isinstance(i, Mapping)]
    ids = [i["id"] for i in items if isinstance(i.get("id"), int)]
    if ids:
        ctx.call("message.ack", {"session_id": ctx.session_id, "ids": ids})
    return {"items": items, "framing": FRAMING}


def msg(ctx: Context, args: Doc) -> Any:
    """``mesh_msg``: send, reply (to a question or a message) or read the inbox."""
    action = args.get("action") or ("reply" if args.get("id") is not None else "send")
    if action == "inbox":
        return inbox(ctx, args)
    if action == "reply":
        return reply(ctx, args)
    if action == "send":
        return send(ctx, args)
    raise ValueError(f"action must be send, reply or inbox, not {action!r}")


def broadcast(ctx: Context, args: Doc) -> Any:
    collect = bool(args.get("collect", False))
    params: Doc = {"session_id": ctx.session_id, "text": str(args["text"]),
                   "collect": collect, "timeout": 10.0}  # fmt: skip
    if args.get("path"):
        params["path"] = resolve(str(args["path"]), ctx.cwd)
    result = ctx.call("broadcast.send", params, timeout=12.0 if collect else None)
    return _framed(result)


def claim(ctx: Context, args: Doc) -> Any:
    """``mesh_claim``: claim (the default action) or release."""
    if args.get("action") == "release":
        return release(ctx, args)
    if args.get("action") not in (None, "", "claim"):
        raise ValueError(f"action must be claim or release, not {args['action']!r}")
    resources = [resolve(str(r), ctx.cwd) for r in args["resources"]]
    ttl = float(args.get("ttl_s") or CLAIM_TTL)
    params = {"session_id": ctx.session_id, "resources": resources, "ttl": ttl,
              "reason": str(args.get("reason") or "")}  # fmt: skip
    result = ctx.call("claim.acquire", params)
    if isinstance(result, dict) and result.get("status") == "granted":
        ctx.claimed(ttl)
    return _compact(result)


def release(ctx: Context, args: Doc) -> Any:
    params: Doc = {"session_id": ctx.session_id}
    if args.get("resources"):
        params["resources"] = [resolve(str(r), ctx.cwd) for r in args["resources"]]
    return ctx.call("claim.release", params)


def handoff(ctx: Context, args: Doc) -> Any:
    params: Doc = {"session_id": ctx.session_id, "summary": str(args["summary"])}
    if args.get("to"):
        params["to"] = str(args["to"])
    for key in ("files", "next_steps"):
        if value := args.get(key):  # a model's lone string is one file or step, not its letters
            params[key] = [value] if isinstance(value, str) else [str(x) for x in value]
    return ctx.call("handoff.write", params)


def board(ctx: Context, args: Doc) -> Any:
    path = resolve(str(args.get("path") or ctx.cwd), ctx.cwd)
    action = args.get("action") or "changes"
    if action == "post":
        params = {"session_id": ctx.session_id, "kind": str(args.get("kind") or "progress"),
                  "text": str(args["text"]), "project_or_path": path}  # fmt: skip
        return ctx.call("board.post", params)
    if action == "show" and ctx.has_method("board.show"):
        return _framed(ctx.call("board.show", {"project_or_path": path}))
    changes = ctx.call("board.changes", {"project_or_path": path})
    return _framed(changes, isinstance(changes, dict) and bool(changes.get("entries")))


def signal(ctx: Context, args: Doc) -> Any:
    name = str(args["name"])
    if args.get("action") == "emit":
        params: Doc = {"session_id": ctx.session_id, "name": name}
        if args.get("payload") is not None:
            params["payload"] = args["payload"]
        return ctx.call("signal.emit", params)
    wait = _wait(args, least=0.0)
    params = {"session_id": ctx.session_id, "name": name, "timeout": wait}
    if args.get("after") is not None:
        params["after"] = int(args["after"])
    got = ctx.call("signal.wait", params, timeout=wait + 2.0)
    return _framed(got, isinstance(got, dict) and bool(got.get("received")))


def once(ctx: Context, args: Doc) -> Any:
    action = args.get("action")
    if action == "list":
        listed = ctx.call("once.list", {"prefix": str(args.get("key") or "")})
        return _framed(listed, isinstance(listed, dict) and bool(listed.get("entries")))
    key = str(args["key"])
    if action == "reserve":
        params = {"session_id": ctx.session_id, "key": key, "note": str(args.get("note") or "")}
        return _mine(ctx, ctx.call("once.reserve", params))
    if action not in ("done", "free"):
        raise ValueError(f"action must be reserve, done, free or list, not {action!r}")
    params = {"session_id": ctx.session_id, "key": key, "outcome": action}
    return ctx.call("once.finish", params)


def _mine(ctx: Context, result: Any) -> Any:
    """A reservation the caller itself holds is "reserved by you", not "running"
    (which the description says means another session is acting)."""
    if not isinstance(result, dict) or result.get("status") != "running":
        return result
    entry = result.get("entry")
    if not isinstance(entry, Mapping) or entry.get("session_id") != ctx.session_id:
        return result
    return {
        **result,
        "status": "reserved by you",
        "hint": "you reserved it earlier and have not finished: act if you have not yet, "
        "then action=done (or action=free if it failed)",
    }


def notes(ctx: Context, args: Doc) -> Any:
    if args.get("action") == "add":
        params = {"session_id": ctx.session_id, "text": str(args["text"]),
                  "private": bool(args.get("private", False))}  # fmt: skip
        return ctx.call("notes.add", params)
    if args.get("action") not in (None, "", "list"):
        raise ValueError(f"action must be add or list, not {args['action']!r}")
    params = {"session_id": ctx.session_id}
    if args.get("author"):
        params["author"] = str(args["author"])
    return _framed(ctx.call("notes.list", params))


# --- the two sets ---------------------------------------------------------------------

from ._schemas import COMPACT_SCHEMAS, FULL_SCHEMAS  # noqa: E402  (they name the handlers)

_HANDLERS: dict[str, Callable[[Context, Doc], Any]] = {
    "mesh_sessions": sessions, "mesh_ask": ask, "mesh_reply": reply, "mesh_send": send,
    "mesh_msg": msg, "mesh_broadcast": broadcast, "mesh_claim": claim, "mesh_release": release,
    "mesh_handoff": handoff, "mesh_inbox": inbox, "mesh_board": board, "mesh_signal": signal,
    "mesh_once": once, "mesh_notes": notes,
}  # fmt: skip
#: Tools that exist only when the daemon serves their method.
OPTIONAL = {
    "mesh_board": "board.changes",
    "mesh_notes": "notes.add",
    "mesh_signal": "signal.emit",
    "mesh_once": "once.reserve",
}


def _build(schemas: Mapping[str, tuple[str, dict[str, Any]]]) -> tuple[Tool, ...]:
    return tuple(
        Tool(name, desc, params, _tool(_HANDLERS[name]), OPTIONAL.get(name))
        for name, (desc, params) in schemas.items()
    )


COMPACT = _build(COMPACT_SCHEMAS)
FULL = _build(FULL_SCHEMAS)
