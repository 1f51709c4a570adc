"""A scripted Anthropic-compatible Messages endpoint on loopback: Claude Code runs offline.

Claude Code (``claude -p``) is pointed at it with ``ANTHROPIC_BASE_URL``, a dummy key
and ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1``. The test gives a ``script``: called
with each request's messages, it returns the next assistant move -- ``Tool(name, args)``
or ``Text(content)``. Every request body is kept (``requests``), so a test reads what
the model was sent: the tools offered, the context hooks added, the tool results.
Streaming (server-sent events) and plain requests are both answered; any request that
is not a conversation turn of the script (a title, a quota probe: no tools offered and
no tool result pending) gets a short text without moving the script.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from tests.scripted_model import Handler, Move, Script, ScriptedModel, Text, Tool

__all__ = ["FakeAnthropic", "Move", "Script", "Text", "Tool", "last_is_tool_result",
           "text_of", "tools_then_done"]  # fmt: skip


def text_of(content: Any) -> str:
    """Every text in a message's content (a string, or blocks: text and tool results)."""
    if isinstance(content, str):
        return content
    out: list[str] = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            out.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            out.append(text_of(block.get("content")))
    return "\n".join(out)


def last_is_tool_result(messages: list[dict[str, Any]]) -> bool:
    """Whether the last message hands back a tool result (the model's turn goes on)."""
    if not messages or messages[-1].get("role") != "user":
        return False
    content = messages[-1].get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


def tools_then_done(moves: list[Tool], final: str = "FAKE-FINAL") -> Script:
    """Make each of ``moves`` in turn (one per request), then answer ``final``."""

    def script(messages: list[dict[str, Any]]) -> Move:
        done = sum(
            1
            for m in messages
            if m.get("role") == "assistant"
            and isinstance(m.get("content"), list)
            and any(isinstance(b, dict) and b.get("type") == "tool_use" for b in m["content"])
        )
        return moves[done] if done < len(moves) else Text(final)

    return script


class FakeAnthropic(ScriptedModel):
    """The server; ``url`` is its base (what ``ANTHROPIC_BASE_URL`` takes)."""

    def __init__(self, script: Script) -> None:
        #: ``requests``: the conversation turns (requests that offered tools), in order
        super().__init__(script, _MessagesHandler)
        #: every request body, side requests included
        self.all_requests: list[dict[str, Any]] = []
        self._all_lock = threading.Lock()

    def tool_names(self, index: int = 0) -> list[str]:
        """Names of the tools offered in conversation turn ``index``."""
        return [str(t.get("name")) for t in self.requests[index].get("tools") or []]

    def tool_results(self) -> list[str]:
        """The text of every tool result the model was sent, in order, without repeats."""
        seen: list[str] = []
        for body in self.requests:
            for m in body.get("messages") or []:
                for block in m.get("content") if isinstance(m.get("content"), list) else []:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        text = text_of(block.get("content"))
                        if text not in seen:
                            seen.append(text)
        return seen

    def seen_text(self) -> str:
        """Everything the model was sent in the conversation's messages (one string)."""
        last = self.requests[-1] if self.requests else {}
        return "\n".join(text_of(m.get("content")) for m in last.get("messages") or [])

    def answer(self, body: dict[str, Any]) -> tuple[Move, str]:
        with self._all_lock:
            self.all_requests.append(body)
        turn = bool(body.get("tools"))
        call_id = f"toolu_fake{self.record(body, keep=turn):04d}"
        if not turn:
            return Text("ok"), call_id
        return self.script(list(body.get("messages") or [])), call_id


class _MessagesHandler(Handler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_json(404, {"type": "error", "error": {"type": "not_found_error",
                                                        "message": "not found"}})  # fmt: skip

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        raw = self.read_body()
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.endswith("/count_tokens"):
            self.send_json(200, {"input_tokens": 10})
            return
        if not path.endswith("/v1/messages"):
            self.do_GET()
            return
        body = json.loads(raw or b"{}")
        move, call_id = self.fake.answer(body)
        model = str(body.get("model") or "claude-fake")
        if body.get("stream"):
            events = _events(move, call_id, model)
            frames = [f"event: {e}\ndata: {json.dumps(d)}\n\n".encode() for e, d in events]
            self.send_events(frames, close=True)
        else:
            self.send_json(200, _message(move, call_id, model))


_USAGE = {"input_tokens": 10, "output_tokens": 5}


def _block(move: Move, call_id: str) -> dict[str, Any]:
    if isinstance(move, Tool):
        return {"type": "tool_use", "id": call_id, "name": move.name, "input": move.args}
    return {"type": "text", "text": move.content}


def _message(move: Move, call_id: str, model: str) -> dict[str, Any]:
    stop = "tool_use" if isinstance(move, Tool) else "end_turn"
    return {"id": f"msg_{call_id}", "type": "message", "role": "assistant", "model": model,
            "content": [_block(move, call_id)], "stop_reason": stop,
            "stop_sequence": None, "usage": _USAGE}  # fmt: skip


def _events(move: Move, call_id: str, model: str) -> list[tuple[str, dict[str, Any]]]:
    start = {**_message(move, call_id, model), "content": [], "stop_reason": None}
    if isinstance(move, Tool):
        first = {"type": "tool_use", "id": call_id, "name": move.name, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(move.args)}
    else:
        first = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": move.content}
    stop = "tool_use" if isinstance(move, Tool) else "end_turn"
    return [
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": first}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": stop, "stop_sequence": None},
                           "usage": {"output_tokens": 5}}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
