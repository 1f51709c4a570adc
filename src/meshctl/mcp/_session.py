"""The mesh session of one ``meshctl mcp`` process, and the context its tool calls get.

One server process is one mesh session. Which one:

- its own (the default, ``--source mcp`` or any other source): id
  ``<source>:<server pid>``, ``process`` liveness on the server's pid, so the session
  ends when the agent closes the server (or the server dies); registered at start;
- the agent's (``--source claude-code``, what ``meshctl claude install`` registers):
  the session Claude Code's hooks register for the Claude Code process
  (:func:`meshctl.claude.hook.session_id`), so the model's mesh tools act as the
  session the hooks report, and there is one session per Claude Code process, not two.
  The server never ends it (``SessionEnd`` does) and registers it only when the
  daemon does not know it.

The session's folder, repo and branch are where the server was started (``--cwd``
names another: a client that starts its servers elsewhere). Its task is
``--task``, else what the first tool call that says what the agent works on gives
(a claim's reason, a handoff's summary).

**Questions.** With no live responder the daemon's status responder answers at once.
While a mesh tool runs, the server is the live responder (a connection of its own,
opened for that call): a question arriving then is handed to the model with the
tool's result, and the model may answer it (a late answer reaches the asker's inbox).

**Daemon down.** Every call fails open: the tool says so in one line, the server
stays up, and registration is tried again at the next call. A daemon that accepts
but does not answer costs one call the timeout, then calls are skipped for a while.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from meshctl._core import env as _env
from meshctl.agent import advice
from meshctl.agent.context import Refused

#: Seconds one request may take (an ask or a signal wait gets its own, longer one).
TIMEOUT = 2.0
#: After the daemon was unreachable or hung, calls are skipped this long (doubling).
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 10.0
#: The source whose session the server shares with the agent's hooks.
SHARED_SOURCES = frozenset({"claude-code"})


class McpSession:
    """The session, its link to meshd, and what waits for the model."""

    def __init__(self, source: str = "mcp", task: str = "", mode: str = "compact", *,
                 profile: str | None = None, socket: str | None = None,
                 cwd: str | None = None) -> None:  # fmt: skip
        import meshctl

        self.lib: Any = meshctl
        self.source = source
        self.mode = mode
        self.task = advice.one_line(task) if task else ""
        self.cwd = os.path.abspath(cwd) if cwd else os.getcwd()
        self.profile = profile or _env.get("MESH_PROFILE") or "default"
        self.socket = socket
        self.shared = source in SHARED_SOURCES
        if self.shared:
            from meshctl.claude.hook import agent_pid, session_id

            self.pid = agent_pid()
            self.session_id = session_id(self.pid)
        else:
            self.pid = os.getpid()
            self.session_id = f"{source}:{self.pid}"
        self.mesh: Any = meshctl.Mesh(self.profile, socket, autostart=False, fail_open=False,
                                      timeout=TIMEOUT)  # fmt: skip
        #: The shared session is the hooks' to register: calls go out as it, and only a
        #: daemon that does not know it (restarted) makes the server register it.
        self.registered = self.shared
        self._lock = threading.Lock()
        self._paused_until = 0.0
        self._backoff = BACKOFF_FIRST
        self._methods: set[str] | None = None
        self.questions: list[dict[str, Any]] = []  # queries shown to nobody yet
        self.askers: dict[int, str] = {}  # query id -> asker (a late reply goes there)

    # --- registration ----------------------------------------------------------------

    def start(self) -> None:
        """At server start: an own session registers now (the daemon may be down)."""
        if not self.shared:
            self.register()

    def register(self) -> bool:
        from meshctl.cli._git import git_place

        place = git_place(self.cwd)
        params = {"session_id": self.session_id, "source": self.source, "pid": self.pid,
                  "liveness": "process", "cwd": self.cwd, "repo": place.repo,
                  "branch": place.branch, "worktree": place.worktree,
                  "task": self.task, "status": "idle"}  # fmt: skip
        if self.shared:  # the hooks keep task and status; a refresh would blank them
            params.pop("task")
            params.pop("status")
        result = self._raw("session.register", {k: v for k, v in params.items() if v})
        self.registered = isinstance(result, dict) and not result.get("disabled")
        return self.registered

    def end(self) -> None:
        """At server exit: an own session ends (the shared one is the hooks' to end)."""
        if not self.shared and self.registered:
            self._raw("session.end", {"session_id": self.session_id, "reason": "mcp closed"})
        self.mesh.close()

    def learned_task(self, name: str, args: dict[str, Any]) -> None:
        """The first tool call that says what the agent works on sets an empty task."""
        if self.task or self.shared:
            return
        said = args.get("reason") or args.get("summary")
        if isinstance(said, str) and said.strip():
            self.task = advice.one_line(said)
            self._raw("session.heartbeat", {"session_id": self.session_id, "task": self.task})

    # --- calls -------------------------------------------------------------------------

    def _raw(self, method: str, params: dict[str, Any], timeout: float | None = None) -> Any:
        """One request; None when unreachable, hung, or refused (never raises)."""
        try:
            return self._call(method, params, timeout)
        except Refused:
            return None

    def _call(self, method: str, params: dict[str, Any], timeout: float | None) -> Any:
        if time.monotonic() < self._paused_until:
            return None
        lib = self.lib
        try:
            result = self.mesh.call(method, params, timeout=timeout)
        except (lib.MeshTimeout, lib.MeshUnavailable) as exc:
            pause = max(self._backoff, 5.0) if isinstance(exc, lib.MeshTimeout) else self._backoff
            self._paused_until = time.monotonic() + pause
            self._backoff = min(pause * 2, BACKOFF_MAX)
            self.registered = self.shared  # an own session registers again once it is back
            return None
        except lib.MeshError as exc:
            data = getattr(exc, "data", None) or {}
            raise Refused(getattr(exc, "message", str(exc)), str(data.get("code") or ""),
                          data) from exc  # fmt: skip
        self._backoff = BACKOFF_FIRST
        return result

    def call(self, method: str, params: dict[str, Any], timeout: float | None = None) -> Any:
        """The context's call: registered first, and again when the daemon forgot us."""
        if not self.registered and not self.register():
            return None
        try:
            return self._call(method, params, timeout)
        except Refused as exc:
            if exc.code not in ("UNKNOWN_SESSION", "SESSION_EXPIRED") or not self.register():
                raise
            return self._call(method, params, timeout)

    def has_method(self, method: str) -> bool:
        if self._methods is None:
            schema = self._raw("mesh.schema", {})
            if not isinstance(schema, dict):
                return False
            self._methods = set(schema.get("methods") or {})
        return method in self._methods

    # --- what arrived --------------------------------------------------------------------

    def arrived(self) -> str:
        """Framed text of what waits for the session (questions held, inbox), acknowledged."""
        result = self._raw("message.inbox", {"session_id": self.session_id, "peek": True})
        items = [dict(i) for i in (result or {}).get("items") or [] if isinstance(i, dict)]
        with self._lock:
            questions, self.questions = self.questions, []
        text = advice.delivery([*questions, *items], mode=self.mode)
        ids = [i["id"] for i in items if isinstance(i.get("id"), int)]
        if ids:
            self._raw("message.ack", {"session_id": self.session_id, "ids": ids})
        return text

    def asker(self, query_id: int) -> str | None:
        return self.askers.get(query_id)

    def claimed(self, ttl: float) -> None:
        """Claims end with the session; an MCP session has no turns to refresh them on."""

    @contextmanager
    def responding(self) -> Iterator[None]:
        """While a tool runs: this server is the session's live responder."""
        stop = threading.Event()
        ready = threading.Event()
        thread = threading.Thread(target=self._respond, args=(stop, ready), daemon=True,
                                  name="mesh-mcp-responder")  # fmt: skip
        thread.start()
        ready.wait(TIMEOUT)
        try:
            yield
        finally:
            stop.set()
            thread.join(TIMEOUT)

    def _respond(self, stop: threading.Event, ready: threading.Event) -> None:
        if not self.registered or time.monotonic() < self._paused_until:
            ready.set()
            return
        try:
            from meshctl._blocking import Connection

            conn = Connection(self.profile, self.socket, autostart=False, timeout=TIMEOUT)
        except Exception:
            ready.set()
            return
        try:
            conn.call("query.respond", {"session_id": self.session_id})
            ready.set()
            while not stop.is_set():
                event = conn.next_event(0.05)
                if isinstance(event, dict) and event.get("kind") == "query":
                    self._held(event)
        except Exception:
            return
        finally:
            ready.set()
            conn.close()

    def _held(self, event: dict[str, Any]) -> None:
        query = {"id": event.get("id"), "kind": "query", "from": event.get("from", ""),
                 "text": event.get("text", "")}  # fmt: skip
        with self._lock:
            if isinstance(query["id"], int):
                self.askers[query["id"]] = str(query["from"])
            self.questions.append(query)
