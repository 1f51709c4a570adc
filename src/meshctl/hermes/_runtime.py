"""Per-process state of the plugin: the Hermes sessions this process hosts, on the mesh.

A Hermes process hosts one session (CLI, TUI, ``chat -q``, a Kanban worker) or many
(a gateway; delegated subagents run as threads of their parent's process). Each is
registered as a mesh session under Hermes's own session id, with ``heartbeat``
liveness and the process's pid, so the daemon expires it at once if Hermes dies.

- **Registration** happens on ``on_session_start`` and lazily on the first hook or
  tool call that names an unknown id (resumed sessions never fire the start hook).
- **Status** comes from the hooks (``thinking``, ``tool-running``, ``idle`` /
  ``waiting-for-user``); each change moves ``last_activity`` on the daemon.
- **One heartbeat thread per process** keeps every live session of the process
  alive with bare heartbeats, which do not move ``last_activity``: an idle chat
  shows as idle, however long it stays open.
- **Failing open**: while the daemon is unreachable every call returns None at once
  (see :mod:`._client`); sessions that could not register are registered on a
  later hook once it is back.
"""

from __future__ import annotations

import contextvars
import json
import os
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from . import _client, _private, _text
from ._agent import advice

#: Hermes tools that write files, and the argument naming the file.
WRITE_TOOLS = {"write_file": "path", "patch": "path"}
#: Hermes tools that read files, and the argument naming the file (:mod:`._reads`).
READ_TOOLS = {"read_file": "path", "search_files": "path"}
#: Interactive surfaces: after a turn they wait for their user.
INTERACTIVE = {"cli", "tui"}
#: The tool that answers a question, per tool set (:mod:`meshctl.agent.tools`).
ANSWER_TOOL = {"compact": "mesh_msg", "full": "mesh_reply"}
#: Questions remembered for a late mesh_reply (query id -> asker), newest kept.
MAX_ASKERS = 256
_PATCH_FILE = ("*** Add File:", "*** Update File:", "*** Delete File:", "*** Move to:")


def source_of(session_id: str, platform: str) -> str:
    """The mesh ``source`` of a Hermes session (SPEC §4)."""
    platform = (platform or "").lower()
    if platform == "subagent":
        return "subagent"
    if platform == "cron" or session_id.startswith("cron_"):
        return "cron"
    if os.environ.get("HERMES_KANBAN_TASK"):
        return "kanban"
    if platform in ("", "cli", "tui"):
        return platform or "cli"
    return f"gateway:{platform}"


def in_background_agent() -> bool:
    """Whether this thread runs one of Hermes's background agents, not a session's turn.

    Hermes's memory/skill review fork runs after a turn under the *parent's* session
    id and platform, on a thread of its own, and so does the skill curator's agent;
    their hooks would report the review prompt as the session's task and hand the
    session's inbox to the fork. Hermes marks both with the write origin
    ``background_review`` (:func:`._private.write_origin`).
    """
    return _private.write_origin() == "background_review"


def hermes_home() -> str:
    """This process's Hermes home, as Hermes resolves it (a profile's folder)."""
    try:
        import importlib

        return str(importlib.import_module("hermes_constants").get_hermes_home())
    except Exception:
        return os.environ.get("HERMES_HOME") or os.path.expanduser("~/.hermes")


def cron_task(session_id: str) -> str:
    """The task of a Hermes cron run: its job's name (``cron_<job id>_<time>``).

    Never the prompt Hermes assembles for the run: that starts with Hermes's own
    instructions to the model and may carry a pre-run script's output or another
    job's report, which are not the session's words (SPEC §6). The job is read from
    ``$HERMES_HOME/cron/jobs.json`` (read only: Hermes's ``load_jobs`` may rewrite it).
    """
    job_id = session_id.removeprefix("cron_").rsplit("_", 2)[0]
    name = ""
    try:
        with open(os.path.join(hermes_home(), "cron", "jobs.json"), encoding="utf-8-sig") as f:
            data = json.load(f)
        jobs = data.get("jobs", []) if isinstance(data, dict) else data
        for job in jobs if isinstance(jobs, list) else []:
            if isinstance(job, dict) and job.get("id") == job_id:
                name = str(job.get("name") or "")
                break
    except (OSError, ValueError):
        pass
    return _text.one_line(f"cron job {name or job_id}")


def _reportable(path: str | None) -> str | None:
    """A reported path with a name that is not UTF-8 shown escaped (``caf\\xe9``):
    JSON carries only UTF-8 (meshd.protocol.contract.reportable, which the plugin
    does not carry)."""
    if path is None:
        return None
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def working_dir() -> str:
    """Where this process's tools work: ``TERMINAL_CWD`` when Hermes set one, else cwd."""
    cwd = os.environ.get("TERMINAL_CWD", "")
    if cwd and os.path.isabs(cwd):
        return cwd
    return os.getcwd()


def broad(path: str | None) -> bool:
    """Whether ``path`` is the home folder or above it (``/``, ``/home``): no project.

    A Hermes gateway works in the home folder (its ``terminal.cwd`` default), and so
    do its cron runs. Reported as the session's place, the daemon would count the
    chat as working at every path under home (SPEC §5 ``present``): every write
    anywhere there warned about it, every changed file became a notice to it.
    """
    if not path:
        return False
    home = os.path.realpath(os.path.expanduser("~"))
    here = os.path.realpath(path)
    return here in (home, "/") or home.startswith(here.rstrip("/") + "/")


def written_paths(tool_name: str, args: Mapping[str, Any]) -> list[str]:
    """Absolute paths a file-writing tool call is about to change (empty for other tools)."""
    if tool_name not in WRITE_TOOLS or not isinstance(args, Mapping):
        return []
    raw: list[str] = []
    value = args.get(WRITE_TOOLS[tool_name])
    if isinstance(value, str) and value:
        raw.append(value)
    patch = args.get("patch")
    if isinstance(patch, str):
        for line in patch.splitlines():
            for prefix in _PATCH_FILE:
                if line.startswith(prefix):
                    raw.append(line[len(prefix) :].strip())
    base = working_dir()
    out: list[str] = []
    for path in raw:
        full = os.path.normpath(os.path.join(base, os.path.expanduser(path)))
        if full not in out:
            out.append(full)
    return out


#: The gateway message being handled in this task (set by ``pre_gateway_dispatch``, which
#: runs in the same coroutine as the plugin command that may follow): (gateway, store,
#: source), so ``/mesh`` acts for the chat it was typed in.
GATEWAY_MESSAGE: contextvars.ContextVar[tuple[Any, Any, Any] | None] = contextvars.ContextVar(
    "meshd_gateway_message", default=None
)


def gateway_session(message: tuple[Any, Any, Any] | None) -> str | None:
    """The session id of the chat a gateway message came from (None if unknown yet)."""
    if message is None:
        return None
    gateway, store, source = message
    key = _private.gateway_session_key(gateway, source)
    if key is None:
        return None
    try:
        sid = store.peek_session_id(key)
    except Exception:
        return None
    return str(sid) if sid else None


class Tracked:
    """One Hermes session of this process, as the plugin knows it."""

    def __init__(self, session_id: str, source: str, platform: str) -> None:
        self.session_id = session_id
        self.source = source
        self.platform = platform
        self.model = ""
        self.parent: str | None = None
        self.group = False
        self.registered = False
        self.status = "idle"
        self.task = ""
        self.notes: dict[str, str] = {}  # tool_call_id -> warning to add to that result
        self.questions: list[dict[str, Any]] = []  # queries for the model, not yet shown
        self.reads: dict[str, float] = {}  # path -> when its read was noted (._reads)
        self.told = False  # had this turn's line on who else works here
        #: whether its model has the mesh tools to answer with (None: not known)
        self.answers: bool | None = None


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
        self._beat: threading.Thread | None = None
        self._responder: threading.Thread | None = None
        self._stop = threading.Event()
        #: query id -> asker, for questions handed to the model (mesh_reply needs it)
        self.askers: dict[int, str] = {}
        #: sessions whose questions this process's responder connection receives now
        self.responding: set[str] = set()
        from ._reads import Reads  # they build on this module
        from ._writes import Writes

        self.reads = Reads(self)
        self.writes = Writes(self)

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
            self._register(t)
        return t

    def _register(self, t: Tracked) -> bool:
        here = working_dir()
        repo, branch, worktree = _client.git_place(here)
        cwd = None if broad(here) else here  # not a project: no place (nor a repo at home)
        if broad(repo):
            repo = branch = worktree = None
        params: dict[str, Any] = {
            "session_id": t.session_id, "source": t.source, "task": t.task,
            "status": t.status, "model": t.model, "pid": os.getpid(),
            "cwd": _reportable(cwd), "repo": _reportable(repo), "branch": branch,
            "worktree": _reportable(worktree), "liveness": "heartbeat",
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
        t.registered = True
        t.reads.clear()  # a session registered again lost its marks with it: record anew
        self.interval = float(result.get("heartbeat_interval") or self.interval)
        self._start_heartbeat()
        return True

    def register_again(self, t: Tracked) -> None:
        """Register ``t`` now if it is not and the daemon may be there."""
        if not t.registered and not self.link.down and not self.link.disabled:
            self._register(t)

    def forget(self, session_id: str) -> None:
        """The daemon no longer knows this session: register it again on the next call."""
        t = self.sessions.get(session_id)
        if t is not None:
            t.registered = False

    def report(self, session_id: str, **fields: Any) -> None:
        """Report a status change (moves ``last_activity``); registers first when needed."""
        t = self.sessions.get(session_id)
        if t is None:
            return
        if fields.get("status"):  # kept even while unregistered: a later registration
            t.status = str(fields["status"])  # (daemon back) says where the session is
        if fields.get("task"):
            t.task = str(fields["task"])
        if not t.registered:
            return
        params = {"session_id": session_id, **{k: v for k, v in fields.items() if v is not None}}
        self.link.call("session.heartbeat", params, forgotten=lambda: self._again(t, params))

    def _again(self, t: Tracked, params: dict[str, Any]) -> None:
        t.registered = False
        if self._register(t):
            self.link.call("session.heartbeat", params)

    def end(self, session_id: str, reason: str = "ended") -> None:
        """``on_session_finalize`` / ``subagent_stop``: end it on the mesh (releases claims)."""
        t = self.sessions.get(session_id)
        if t is not None and t.registered:
            self.writes.flush_session(t)  # before the end: the daemon takes none after
        with self._lock:  # nothing of an ended session is kept (a gateway runs for weeks)
            t = self.sessions.pop(session_id, None)
            self.parents.pop(session_id, None)
            self.groups.discard(session_id)
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
                    self._register(t)

    # --- heartbeat thread -------------------------------------------------------------

    def _start_heartbeat(self) -> None:
        with self._lock:
            if self._beat is None or not self._beat.is_alive():
                self._beat = threading.Thread(target=self._run, name="meshd-heartbeat", daemon=True)
                self._beat.start()
            if self._responder is None or not self._responder.is_alive():
                self._responder = threading.Thread(
                    target=self._respond, name="meshd-responder", daemon=True
                )
                self._responder.start()

    def _run(self) -> None:
        """Bare heartbeats for every live session of this process, on a link of its own."""
        link = _client.Link(self.profile, self.socket)
        try:
            while not self._stop.wait(self.interval):
                for t in list(self.sessions.values()):
                    if t.registered:
                        link.call(
                            "session.heartbeat",
                            {"session_id": t.session_id},
                            forgotten=lambda t=t: self.forget(t.session_id),  # type: ignore[misc]
                        )
                    elif not link.disabled:
                        self._register(t)
        finally:
            link.close()

    def stop(self) -> None:
        self._stop.set()
        self.reads.stop()
        self.writes.stop()

    # --- live responder ---------------------------------------------------------------

    def _respond(self) -> None:
        """One connection answers queries for every session of this process (SPEC §6).

        A query to a session whose model is at work is queued for the model (it sees it
        after its next tool call and may answer with ``mesh_reply`` before the asker's
        timeout; if not, the daemon's status responder answers). A query to a session
        waiting for its user is answered at once from what the plugin knows, and queued
        for the model's next turn.
        """
        backoff = 0.5
        while not self._stop.is_set():
            try:
                conn = _client.listener(self.profile, self.socket)
            except Exception:
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            backoff = 0.5
            try:
                self._serve(conn)
            except Exception:
                self._stop.wait(backoff)
            finally:
                conn.close()

    def _serve(self, conn: Any) -> None:
        serving = self.responding = set()  # a new connection: responds for none yet
        while not self._stop.is_set():
            for t in list(self.sessions.values()):
                if t.registered and not t.group and t.session_id not in serving:
                    conn.call("query.respond", {"session_id": t.session_id})
                    serving.add(t.session_id)
            serving &= set(self.sessions)
            event = conn.next_event(0.25)
            if isinstance(event, dict) and event.get("kind") == "query":
                self.on_query(conn, event)

    def on_query(self, conn: Any, event: Mapping[str, Any]) -> None:
        t = self.sessions.get(str(event.get("session_id") or event.get("to") or ""))
        if t is None:
            return
        query = {"id": event.get("id"), "kind": "query", "from": event.get("from", ""),
                 "text": event.get("text", "")}  # fmt: skip
        doing = f": {t.task}" if t.task else ""
        if t.answers is False:  # its model has no tool to answer with: the status, now
            self._status(conn, t, query, f"{t.session_id} is {t.status}{doing}. Its model "
                         "runs without the mesh tools, so it cannot answer questions.")  # fmt: skip
            return
        if isinstance(query["id"], int):
            self.askers[query["id"]] = str(query["from"])
            while len(self.askers) > MAX_ASKERS:  # oldest first (dicts keep order)
                del self.askers[next(iter(self.askers))]
        t.questions.append(query)
        if t.status in ("thinking", "tool-running"):
            return  # the model may answer mid-turn; else the status responder does
        self._status(conn, t, query, f"{t.session_id} is {t.status}{doing}. Its model is not "
                     "running now; your question was passed on to it, and an answer it gives "
                     "later will reach your inbox.")  # fmt: skip

    def _status(self, conn: Any, t: Tracked, query: Mapping[str, Any], text: str) -> None:
        """Answer ``query`` at once with the session's status, marked as such (a daemon
        older than ``by`` refuses the field: then unmarked, as before)."""
        params = {"session_id": t.session_id, "query_id": query["id"], "text": text}
        try:
            conn.call("query.answer", {**params, "by": "status"})
        except Exception as exc:
            if getattr(exc, "data", {}).get("code") != "INVALID_PARAMS":
                return
            try:
                conn.call("query.answer", params)
            except Exception:
                return

    def learn_tools(self, t: Tracked) -> None:
        """From ``pre_llm_call``, once per session: whether its model has the tool that
        answers a question (not known: assumed). Without it, questions get the status
        at once and deliveries name no tool."""
        if t.answers is None:
            names = _private.agent_tool_names()
            if names is not None:
                t.answers = ANSWER_TOOL.get(self.mode, "mesh_msg") in names

    # --- delivery ---------------------------------------------------------------------

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
        """Unread items for the session (handed over, acknowledged by :meth:`ack`)."""
        result = self.link.call(
            "message.inbox", {"session_id": t.session_id, "peek": True},
            forgotten=lambda: self.forget(t.session_id),
        )  # fmt: skip
        if not isinstance(result, dict):
            return []
        return [dict(i) for i in result.get("items") or [] if isinstance(i, Mapping)]

    def ack(self, t: Tracked, items: Iterable[Mapping[str, Any]]) -> None:
        ids = [int(i["id"]) for i in items if isinstance(i.get("id"), int)]
        if ids:
            self.link.call("message.ack", {"session_id": t.session_id, "ids": ids})

    def deliver(self, t: Tracked, notes: Iterable[str] = ()) -> str:
        """Framed text of what waits for the session (and ``notes``); acknowledged."""
        items = self.inbox(t)
        questions, t.questions = t.questions, []
        mode = self.mode if t.answers is not False else "none"  # no tool to name
        text = _text.delivery([*questions, *items], notes, mode)
        self.ack(t, items)
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
