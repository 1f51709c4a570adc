"""Per-process state of the plugin: the Hermes sessions this process hosts, on the mesh.

A Hermes process hosts one session (CLI, TUI, ``chat -q``, a Kanban worker) or many
(a gateway; delegated subagents run as threads of their parent's process). Each is
registered as a mesh session under Hermes's own session id, with ``heartbeat``
liveness and the process's pid, so the daemon expires it at once if Hermes dies.

- **Registration** happens on ``on_session_start`` and lazily on the first hook or
  tool call that names an unknown id (resumed sessions never fire the start hook).
- **Status** comes from the hooks (``thinking``, ``tool-running``, ``idle`` /
  ``waiting-for-user``); each change moves ``last_activity`` on the daemon. The
  hook only notes it: the process's one sender (:mod:`._sender`) sends it, with
  the files read and written and the bare heartbeats that keep every live session
  of the process alive without moving ``last_activity`` (an idle chat shows as
  idle, however long it stays open). :meth:`Runtime.flush` sends what waits now.
- **On the hook's path** stays only what a hook must answer with: the claim check
  before a write (its warning). The inbox a tool result or a turn carries is read
  from the view the responder's connection keeps (:mod:`._view`), and from the
  daemon only while that view is not in sync; what was shown is acknowledged by
  the sender.
- **Failing open**: while the daemon is unreachable every call returns None at once
  (see :mod:`._client`); sessions that could not register are registered on a
  later hook once it is back.

The runtime composes the parts; none of them imports it (:mod:`._common` holds
what they share).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from . import _client, _private, _text
from ._agent import advice
from ._common import (
    ANSWER_TOOL,
    GATEWAY_MESSAGE,
    READ_TOOLS,
    REGISTRATIONS,
    WRITE_TOOLS,
    Tracked,
    broad,
    cron_task,
    gateway_session,
    reportable,
    source_of,
    working_dir,
    written_paths,
)
from ._reads import Reads
from ._responder import Responder
from ._sender import Sender
from ._status import Status
from ._view import Acks, View
from ._writes import Writes


class Runtime:
    """Everything the plugin keeps in one Hermes process (one instance, made by register)."""

    def __init__(self, hermes_profile: str) -> None:
        self.profile, self.socket = _client.where(hermes_profile)
        self.link = _client.Link(self.profile, self.socket)
        self.sessions: dict[str, Tracked] = {}
        self.parents: dict[str, str] = {}
        self.groups: set[str] = set()
        self.last_session: str | None = None
        #: the tool set the model sees (:mod:`._tools`): inbox lines name its tools
        self.mode = "compact"
        self.interval = 5.0
        self._lock = threading.RLock()
        self._registering = threading.Lock()  # one registration at a time (hooks, sender)
        self._stop = threading.Event()
        self.sender = Sender(self, lambda: _client.Link(self.profile, self.socket))
        self.status = Status(self)
        self.reads = Reads(self, self.sender)
        self.writes = Writes(self, self.sender)
        self.acks = Acks(self, self.sender)
        for box in (self.status, self.reads, self.writes, self.acks):
            self.sender.add(box)
        #: what waits for each session, as pushed to the responder's connection
        self.view = View(self.sessions)
        self.responder = Responder(self.sessions, self.profile, self.socket, self.view, self.forget)
        #: query id -> asker, for questions handed to the model (mesh_reply needs it)
        self.askers = self.responder.askers

    # --- registration ---------------------------------------------------------------

    def track(self, session_id: str, platform: str = "", model: str = "") -> Tracked | None:
        """The session, registered if the daemon is there (None for an empty id)."""
        if not session_id:
            return None
        with self._lock:
            t = self.sessions.get(session_id)
            if t is None:
                t = Tracked(session_id, source_of(session_id, platform), platform)
                if t.source == "cron":
                    t.task = cron_task(session_id)
                t.parent = self.parents.get(session_id)
                t.group = session_id in self.groups
                self.sessions[session_id] = t
            if model and not t.model:
                t.model = model
            if t.source != "subagent":
                self.last_session = session_id
        if not t.registered and not self.link.down and not self.link.disabled:
            self.register(t)
        return t

    @property
    def responding(self) -> set[str]:
        """Sessions whose questions the responder's connection receives now."""
        return self.responder.responding

    def register(self, t: Tracked) -> bool:
        """Register ``t`` (again: set ``registered`` False first) now, with where it is
        and its latest status and task; whether the daemon took it. The hooks' threads
        and the sender's may find it unregistered at once: it is registered once."""
        with self._registering:
            return t.registered or self._register(t)

    def _register(self, t: Tracked) -> bool:
        here = working_dir()
        repo, branch, worktree = _client.git_place(here)
        cwd = None if broad(here) else here  # not a project: no place (nor a repo at home)
        if broad(repo):
            repo = branch = worktree = None
        params: dict[str, Any] = {
            "session_id": t.session_id, "source": t.source, "task": t.task,
            "status": t.status, "model": t.model, "pid": os.getpid(),
            "cwd": reportable(cwd), "repo": reportable(repo), "branch": branch,
            "worktree": reportable(worktree), "liveness": "heartbeat",
        }  # fmt: skip
        if t.parent:
            params["parent"] = t.parent
        kanban = os.environ.get("HERMES_KANBAN_TASK")
        if kanban:
            params["kanban_task"] = kanban
        if t.group:
            params["accept_messages"] = False
        result = self.link.call(
            "session.register", {k: v for k, v in params.items() if v is not None}
        )
        if not isinstance(result, dict):
            return False
        if result.get("disabled"):
            self.link.disabled = True
            return False
        t.epoch = next(REGISTRATIONS)  # the view follows it once subscribed again
        t.registered = True
        t.reads.clear()  # a session registered again lost its marks with it: record anew
        self.interval = float(result.get("heartbeat_interval") or self.interval)
        self.sender.start()  # its heartbeats keep the session alive
        self.responder.start()
        return True

    def register_again(self, t: Tracked) -> None:
        """Register ``t`` now if it is not and the daemon may be there."""
        if not t.registered and not self.link.down and not self.link.disabled:
            self.register(t)

    def forget(self, session_id: str, epoch: int | None = None) -> None:
        """The daemon no longer knows this session: register it again on the next call.
        With ``epoch``, only if that registration is still the session's: a reply about
        an earlier registration does not undo one made since."""
        t = self.sessions.get(session_id)
        if t is not None and (epoch is None or t.epoch == epoch):
            t.registered = False

    def report(self, session_id: str, **fields: Any) -> None:
        """Note a status change (moves ``last_activity``) for the sender (:mod:`._status`)."""
        t = self.sessions.get(session_id)
        if t is None:
            return
        if fields.get("status"):  # kept even while unregistered: a later registration
            t.status = str(fields["status"])  # (daemon back) says where the session is
        if fields.get("task"):
            t.task = str(fields["task"])
        if self.link.down or self.link.disabled:
            return  # a registration once the daemon is back says where it is
        # Noted even while the daemon does not know the session (the responder found
        # out between the hook's track and this report): the sender then registers it
        # again at once, with this status, instead of at its next heartbeat.
        if self.status.note(t, fields):
            self.sender.wake()

    def flush(self) -> None:
        """Send what the hooks noted (statuses, reads, writes) now, on this thread;
        returns when it is sent. Whoever reads back what the plugin reported right
        after a hook calls this first."""
        self.sender.flush()

    def end(self, session_id: str, reason: str = "ended") -> None:
        """``on_session_finalize`` / ``subagent_stop``: end it on the mesh (releases claims)."""
        t = self.sessions.get(session_id)
        if t is not None:
            self.sender.flush_session(t)  # before the end: the daemon takes none after
        with self._lock:  # nothing of an ended session is kept (a gateway runs for weeks)
            t = self.sessions.pop(session_id, None)
            self.parents.pop(session_id, None)
            self.groups.discard(session_id)
        self.view.forget(session_id)
        if t is not None and t.registered:
            self.link.call("session.end", {"session_id": session_id, "reason": reason})

    def run_over(self, session_id: str) -> bool:
        """``on_session_end`` of a run that was the whole session: a cron job's (ended here).

        A cron run is one turn and Hermes never finalizes it: in a gateway's ticker it
        would otherwise stay on the mesh, idle and heartbeated, for good.
        """
        t = self.sessions.get(session_id)
        if t is None or t.source != "cron":
            return False
        self.end(session_id, "cron job finished")
        return True

    def subagent(self, parent: str | None, child: str | None) -> None:
        """Remember a delegated child's parent, so it registers with the link."""
        if parent and child:
            with self._lock:
                self.parents[child] = parent
                t = self.sessions.get(child)
            if t is not None and t.parent is None:
                t.parent = parent
                if t.registered:
                    t.registered = False
                    self.register(t)

    def stop(self) -> None:
        self._stop.set()
        self.sender.stop()
        self.responder.stop()

    def close(self) -> None:
        """Stop the threads and close every connection (waits for a call in flight)."""
        self._stop.set()
        self.sender.close()
        self.responder.stop(wait=5.0)
        self.link.close()

    def learn_tools(self, t: Tracked) -> None:
        """From ``pre_llm_call``, once per session: whether its model has the tool that
        answers a question (not known: assumed). Without it, questions get the status
        at once and deliveries name no tool."""
        if t.answers is None:
            names = _private.agent_tool_names()
            if names is not None:
                t.answers = ANSWER_TOOL.get(self.mode, "mesh_msg") in names

    def register_cli_at_start(self, wait: float = 600.0) -> None:
        """An interactive CLI emits no hook until its first message: register it as soon
        as Hermes made it (``_cli_ref``), waiting for its user; its task comes with that
        message. One short-lived thread, only in a process that may host a CLI."""

        def watch() -> None:
            deadline = time.monotonic() + wait
            while not self._stop.is_set() and time.monotonic() < deadline:
                sid = _private.cli_session_id()
                if sid:
                    fresh = Tracked(sid, source_of(sid, "cli"), "cli")
                    fresh.status = "waiting-for-user"  # opened, nothing asked yet
                    with self._lock:
                        self.sessions.setdefault(sid, fresh)
                    self.track(sid, "cli")
                    return
                self._stop.wait(0.5)

        threading.Thread(target=watch, name="meshd-cli-start", daemon=True).start()

    # --- delivery ---------------------------------------------------------------------

    def inbox(self, t: Tracked) -> list[dict[str, Any]]:
        """Unread items for the session, read from the daemon (peek: acknowledged once
        shown, by the sender)."""
        result = self.link.call(
            "message.inbox", {"session_id": t.session_id, "peek": True},
            forgotten=lambda: self.forget(t.session_id),
        )  # fmt: skip
        if not isinstance(result, dict):
            return []
        return [dict(i) for i in result.get("items") or [] if isinstance(i, Mapping)]

    def deliver(self, t: Tracked, notes: Iterable[str] = ()) -> str:
        """Framed text of what waits for the session (and ``notes``); what it shows is
        acknowledged by the sender once this returns. From the pushed view when it is
        in sync (no request), else from the daemon's inbox (:mod:`._view`)."""
        view = self.view
        if view.in_sync(t):
            items = view.take(t)
        else:
            if not self.link.down:
                view.fallbacks += 1  # a request on the hook's path
            items = view.take(t, self.inbox(t))
        questions: list[dict[str, Any]] = []
        if t.questions:
            questions, t.questions = t.questions, []
        if not items and not questions and not notes:
            return ""
        mode = self.mode if t.answers is not False else "none"  # no tool to name
        text = _text.delivery([*questions, *items], notes, mode)
        self.acks.note(t, items)
        return text

    def presence_note(self, t: Tracked) -> str:
        """At a session's first turn: who else claims or works in its folder (short)."""
        cwd = working_dir()
        if broad(cwd):  # everyone under home would be "in your folder"
            return ""
        check = self.link.call("claim.check", {"resources": [cwd], "session_id": t.session_id})
        if not isinstance(check, dict):
            return ""
        if check.get("present"):
            t.told = True  # the presence line is said once a turn
        return advice.start_note(cwd, check)

    def gateway_message(self, event: Any, gateway: Any, store: Any) -> None:
        """``pre_gateway_dispatch``: remember multi-party chats (no mesh context for them).

        Runs on the gateway's event loop, so it touches no socket: it only reads the
        session store Hermes passes in, and marks the session as a group chat.
        """
        source = getattr(event, "source", None)
        if source is None:
            return
        GATEWAY_MESSAGE.set((gateway, store, source))
        chat_type = str(getattr(source, "chat_type", "") or "").lower()
        if chat_type in ("", "dm", "private", "direct"):
            return
        sid = gateway_session((gateway, store, source))
        if sid:
            with self._lock:
                self.groups.add(str(sid))
                t = self.sessions.get(str(sid))
            if t is not None:
                t.group = True

    # --- warnings before writes -------------------------------------------------------

    def check_write(self, t: Tracked, tool_name: str, args: Any, call_id: str) -> None:
        """Before a file write: a note for the tool result when it matters
        (:func:`meshctl.agent.advice.advise`: claims and recent changes of that very
        file ask for approval; mere presence is one line per turn)."""
        paths = written_paths(tool_name, args)
        if not paths:
            return
        check = self.link.call("claim.check", {"resources": paths, "session_id": t.session_id})
        said = advice.advise(paths, check, told=t.told)
        if said.level == "info":
            t.told = True
        if said.text:
            t.notes[call_id or tool_name] = said.text

    def after_tool(self, t: Tracked, tool_name: str, args: Any) -> None:
        """After a tool succeeded: a write or a read noted for the board (a write even
        while the session is not registered: it is reported once it is)."""
        if tool_name in WRITE_TOOLS:
            self.changed(t, tool_name, args)
        elif tool_name in READ_TOOLS and t.registered and not t.group:  # groups: told nothing
            self.reads.note(t, tool_name, args)

    def changed(self, t: Tracked, tool_name: str, args: Any) -> None:
        """After a file write: note the paths (never contents) for the board; the
        writes thread reports them, now or once the daemon is back (:mod:`._writes`)."""
        self.writes.note(t, written_paths(tool_name, args))
