"""What the two scripted model endpoints share: an HTTP server on loopback, a script of moves.

Hermes speaks the OpenAI chat API (``tests/hermes/fake_llm.py``), Claude Code the
Anthropic Messages API (``tests/claude/fake_anthropic.py``); each of those says only
its own wire format. Here: the moves a script makes (``Tool(name, args)`` or
``Text(content)``), the server's life as a context manager, a numbered call id per
answered move, and the handler's JSON and event-stream replies.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple, Self, cast


class Tool(NamedTuple):
    name: str
    args: dict[str, Any]


class Text(NamedTuple):
    content: str


Move = Tool | Text
Script = Callable[[list[dict[str, Any]]], Move]


class Handler(BaseHTTPRequestHandler):
    """One request; ``fake`` is the server's ``ScriptedModel``. Quiet, JSON or events."""

    @property
    def fake(self) -> Any:
        return cast(Any, self.server).fake

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def send_json(self, code: int, doc: Any) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_events(self, frames: Iterable[bytes], *, close: bool = False) -> None:
        """A server-sent event stream of ``frames``; the connection closes after it."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        for frame in frames:
            self.wfile.write(frame)
        self.wfile.flush()
        self.close_connection = True


class ScriptedModel:
    """The server (start it with ``with``); ``url`` is ``http://127.0.0.1:PORT`` + ``path``."""

    def __init__(self, script: Script, handler: type[Handler], path: str = "") -> None:
        self.script = script
        #: the requests the script answered, in order
        self.requests: list[dict[str, Any]] = []
        self._calls = 0
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.server.fake = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def record(self, body: dict[str, Any], *, keep: bool = True) -> int:
        """The number of this call (from 1); ``keep`` files ``body`` under ``requests``."""
        with self._lock:
            if keep:
                self.requests.append(body)
            self._calls += 1
            return self._calls
