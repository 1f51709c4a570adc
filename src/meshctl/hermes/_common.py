"""What the plugin's parts share: the Hermes session as the plugin knows it
(:class:`Tracked`), what they need of the runtime (:class:`Host`), and the helpers
that read Hermes's place and tool calls (paths, sources, the gateway chat).

The lowest of the plugin's stateful modules: it imports none of those that use it
(:mod:`._runtime` composes them; :mod:`._sender`, :mod:`._status`, :mod:`._reads`,
:mod:`._writes` and :mod:`._responder` build on this one, never on the runtime).
"""

from __future__ import annotations

import contextvars
import itertools
import json
import os
from collections.abc import Mapping
from typing import Any, Protocol

from . import _private, _text

#: Hermes tools that write files, and the argument naming the file.
WRITE_TOOLS = {"write_file": "path", "patch": "path"}
#: Hermes tools that read files, and the argument naming the file (:mod:`._reads`).
READ_TOOLS = {"read_file": "path", "search_files": "path"}
#: Interactive surfaces: after a turn they wait for their user.
INTERACTIVE = {"cli", "tui"}
#: The tool that answers a question, per tool set (:mod:`meshctl.agent.tools`).
ANSWER_TOOL = {"compact": "mesh_msg", "full": "mesh_reply"}
_PATCH_FILE = ("*** Add File:", "*** Update File:", "*** Delete File:", "*** Move to:")
#: The number of each registration of a session in this process (:attr:`Tracked.epoch`).
#: One count for the process, never per session: a session ended and tracked again
#: under the same id (a resumed chat) is a new :class:`Tracked`, and a per-session
#: count would give its first registration the number the responder and the view
#: still hold for the old one (never subscribed again, or a view trusted unsubscribed).
REGISTRATIONS = itertools.count(1)


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


def reportable(path: str | None) -> str | None:
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


def absolute(path: str, base: str | None = None) -> str:
    """``path`` as ``os.path.normpath(os.path.join(base or working_dir(), path))`` after
    ``~`` is expanded -- the same string, at a fraction of the cost on every write: the
    working folder (``TERMINAL_CWD`` or a ``getcwd`` system call) is asked only for a
    relative path, and a path is normalised only when it may not be already (a ``//``,
    a ``/.`` or a trailing ``/`` in it)."""
    if path[:1] == "~":
        path = os.path.expanduser(path)
    if path[:1] != "/":
        path = os.path.join(base or working_dir(), path)
    elif "//" not in path and "/." not in path and path[-1:] != "/":
        return path
    return os.path.normpath(path)


def written_paths(tool_name: str, args: Mapping[str, Any]) -> list[str]:
    """Absolute paths a file-writing tool call is about to change (empty for other tools)."""
    key = WRITE_TOOLS.get(tool_name)
    if key is None or not (type(args) is dict or isinstance(args, Mapping)):
        return []
    out: list[str] = []
    value = args.get(key)
    if isinstance(value, str) and value:
        out.append(absolute(value))
    patch = args.get("patch")
    if isinstance(patch, str) and "*** " in patch:
        for line in patch.splitlines():
            for prefix in _PATCH_FILE:
                if line.startswith(prefix):
                    full = absolute(line[len(prefix) :].strip())
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
        #: its latest registration's number (0: none), from :data:`REGISTRATIONS` (the
        #: inbox view is in sync for one registration: ._view)
        self.epoch = 0
        self.status = "idle"
        self.task = ""
        self.notes: dict[str, str] = {}  # tool_call_id -> warning to add to that result
        self.questions: list[dict[str, Any]] = []  # queries for the model, not yet shown
        self.reads: dict[str, float] = {}  # path -> when its read was noted (._reads)
        self.told = False  # had this turn's line on who else works here
        #: whether its model has the mesh tools to answer with (None: not known)
        self.answers: bool | None = None


class Host(Protocol):
    """What the background parts (:mod:`._sender` and its outboxes) need of the runtime."""

    sessions: dict[str, Tracked]
    #: the hooks' link (its ``down`` says the daemon was away a moment ago)
    link: Any
    #: seconds between bare heartbeats (the daemon's advice)
    interval: float

    def forget(self, session_id: str) -> None:
        """The daemon no longer knows this session: register it again."""
        ...

    def register(self, t: Tracked) -> bool:
        """Register ``t`` (again) now; whether the daemon took it."""
        ...

    def register_again(self, t: Tracked) -> None:
        """Register ``t`` now if it is not and the daemon may be there."""
        ...
