"""A scripted OpenAI-compatible chat server on loopback: Hermes runs with no LLM, no network.

The test gives a ``script``: called with each request's messages, it returns the
next assistant move -- ``Tool(name, args)`` or ``Text(content)``. Every request body
is kept (``requests``), so a test can read exactly what the model was sent: the
tools it was offered, the context hooks appended, the tool results. Streaming and
non-streaming requests are both answered. The server itself is ``tests/scripted_model.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.scripted_model import Handler, Move, Script, ScriptedModel, Text, Tool

__all__ = ["FakeLLM", "Move", "Script", "Text", "Tool", "content", "last", "one_tool_then_done"]


def last(messages: list[dict[str, Any]], role: str) -> dict[str, Any] | None:
    """The last message of ``role``."""
    return next((m for m in reversed(messages) if m.get("role") == role), None)


def content(message: dict[str, Any] | None) -> str:
    """A message's text, whether it is a string or a list of parts."""
    if message is None:
        return ""
    c = message.get("content")
    if isinstance(c, list):
        return "".join(str(p.get("text", "")) for p in c if isinstance(p, dict))
    return str(c or "")


def one_tool_then_done(name: str, args: dict[str, Any], final: str = "FAKE-FINAL") -> Script:
    """Call ``name`` once (when the last message is the user's), then answer ``final``."""

    def script(messages: list[dict[str, Any]]) -> Move:
        if messages and messages[-1].get("role") == "tool":
            return Text(final)
        return Tool(name, args)

    return script


class FakeLLM(ScriptedModel):
    """The server; ``url`` is its ``/v1`` base. Use as a context manager."""

    def __init__(self, script: Script) -> None:
        super().__init__(script, _OpenAIHandler, "/v1")
        #: called with each chat request before it is answered (a test may block here)
        self.on_request: Callable[[dict[str, Any]], None] | None = None

    def tool_messages(self) -> list[str]:
        """Every tool result the model was sent, in order, without repeats."""
        seen: list[str] = []
        for body in self.requests:
            for m in body.get("messages") or []:
                if m.get("role") == "tool" and content(m) not in seen:
                    seen.append(content(m))
        return seen

    def tool_names(self, index: int = 0) -> list[str]:
        """Names of the tools offered in request ``index``."""
        tools = self.requests[index].get("tools") or []
        return [t["function"]["name"] for t in tools]

    def answer(self, body: dict[str, Any]) -> tuple[Move, str]:
        call_id = f"call_{self.record(body)}"
        if self.on_request is not None:
            self.on_request(body)
        return self.script(list(body.get("messages") or [])), call_id


class _OpenAIHandler(Handler):
    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self.send_json(200, {"object": "list", "data": [{"id": "fake-model",
                           "object": "model", "owned_by": "test"}]})  # fmt: skip
        else:
            self.send_json(404, {"error": "not found"})

    def do_POST(self) -> None:
        raw = self.read_body()
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self.send_json(404, {"error": "not found"})
            return
        body = json.loads(raw or b"{}")
        move, call_id = self.fake.answer(body)
        if body.get("stream"):
            frames = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in _chunks(move, call_id)]
            self.send_events([*frames, b"data: [DONE]\n\n"])
        else:
            self.send_json(200, _completion(move, call_id))


_USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def _tool_call(move: Tool, call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": move.name, "arguments": json.dumps(move.args)}}  # fmt: skip


def _completion(move: Move, call_id: str) -> dict[str, Any]:
    if isinstance(move, Tool):
        message: dict[str, Any] = {"role": "assistant", "content": None,
                                   "tool_calls": [_tool_call(move, call_id)]}  # fmt: skip
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": move.content}, "stop"
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0,
            "model": "fake-model", "usage": _USAGE,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}]}  # fmt: skip


def _chunks(move: Move, call_id: str) -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                "model": "fake-model",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip

    if isinstance(move, Tool):
        call = {"index": 0, **_tool_call(move, call_id)}
        first = chunk({"role": "assistant", "tool_calls": [call]}, None)
        end = chunk({}, "tool_calls")
    else:
        first = chunk({"role": "assistant", "content": move.content}, None)
        end = chunk({}, "stop")
    end["usage"] = _USAGE
    return [first, end]
