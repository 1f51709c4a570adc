"""One Claude Code hook: read the event on stdin, tell the mesh, maybe add context.

Claude Code starts this for every event it is registered for (``meshctl claude
install`` writes ``python -S <this file>`` into its settings) and waits for it, so
it must cost next to nothing: standard library only, the few modules it needs, one
connection, its requests sent together. With the daemon down (or the mesh switched
off) it prints nothing and exits 0 at once: a hook never fails Claude Code, never
blocks a tool and never asks for a permission (the warnings are advisory).

What each event does (``hook_event_name`` in the JSON on stdin):

- ``SessionStart``: registers the session (source ``claude-code``, the Claude Code
  process's pid with ``process`` liveness, its folder, repo and branch) and, when
  other sessions claim or work in that folder, says who (additional context).
- ``UserPromptSubmit``: the prompt becomes the task (first 200 characters, one
  line), status ``thinking``; what waits in the inbox is handed over, framed as
  coming from other sessions of the same user, and acknowledged.
- ``PreToolUse`` (``Write|Edit|MultiEdit|NotebookEdit``): checks the path; when
  another session claims it or changed it recently, a warning naming that session,
  its task, reason and branch is added to the model's context. The write goes on.
- ``PostToolUse``: written paths go to the board (``board.changed``); a ``Read``
  is recorded (``board.touch --read``) so a later change by another session is
  told to this one.
- ``Stop``: status ``waiting-for-user`` (the turn is over).
- ``SessionEnd``: ends the session (its claims are released).

The session's id is ``claude-code:<pid of the Claude Code process>``: every hook of
one Claude Code process, and the MCP server it started, compute the same id without
sharing a file.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: importing typing costs a hook's start-up ms
if TYPE_CHECKING:
    import _socket
    from typing import Any

if not __package__:  # run as a file (python -S …/meshctl/claude/hook.py): no site-packages
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SOURCE = "claude-code"
#: Seconds one hook waits for the daemon (``MESH_HOOK_TIMEOUT`` sets another).
TIMEOUT = 1.0
#: Claude Code's tools that write a file, and the argument naming it.
WRITE_TOOLS = {"Write": "file_path", "Edit": "file_path", "MultiEdit": "file_path",
               "NotebookEdit": "notebook_path"}  # fmt: skip
READ_TOOLS = {"Read": "file_path"}
#: The tool set the model has (``meshctl mcp``'s default): how inbox lines say to answer.
MODE = "compact"
#: Processes between Claude Code and a hook (it runs hooks through a shell).
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "fish", "env", "timeout"})
#: Errors that mean the daemon does not know the session (it restarted, or it expired).
_FORGOTTEN = frozenset({-32001, -32002})


def agent_pid(start: int | None = None) -> int:
    """The pid of the agent that started this process (shells in between skipped).

    Claude Code runs each hook through a shell; the MCP servers it starts are its
    children too. On a system without ``/proc`` the parent is taken as it is.
    """
    pid = os.getppid() if start is None else start
    for _ in range(6):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            return pid
        end = stat.rindex(b")")
        comm = stat[stat.index(b"(") + 1 : end].decode("utf-8", "replace")
        ppid = int(stat[end + 2 :].split()[1])
        if comm not in _SHELLS or ppid <= 1:
            return pid
        pid = ppid
    return pid


def session_id(pid: int) -> str:
    return f"{SOURCE}:{pid}"


class Link:
    """One connection to meshd; requests sent together, replies matched by id.

    The client's own wire (:mod:`meshctl._conn`: json's C parts, not json and its
    regular expressions) and connect (:mod:`meshctl._spawn`: the socket folder and the
    daemon's uid checked before a byte is sent).
    """

    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.next_id = 0

    def batch(self, calls: list[tuple[str, dict[str, object]]]) -> list[dict[str, object]]:
        """The replies (``result`` or ``error`` objects) to ``calls``, in their order."""
        from meshctl import _conn

        first = self.next_id + 1
        frames = []
        for method, params in calls:
            self.next_id += 1
            request = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
            frames.append(_conn.encode(request))
        self.sock.sendall(b"".join(frames))
        got: dict[int, dict[str, object]] = {}
        while len(got) < len(calls):
            msg = _conn.loads(self._line().decode("utf-8", "replace"))
            if isinstance(msg, dict) and isinstance(msg.get("id"), int):
                got[msg["id"]] = msg
        return [got.get(i, {}) for i in range(first, first + len(calls))]

    def _line(self) -> bytes:
        while b"\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise OSError("meshd closed the connection")
            self.buf += data
        line, _, self.buf = self.buf.partition(b"\n")
        return line


def connect() -> Link | None:
    """A connection to the profile's daemon, or None (down, or not the user's own)."""
    from meshctl import _spawn
    from meshctl._core import env as _env
    from meshd.protocol.errors import MeshError

    profile = _env.get("MESH_PROFILE") or "default"
    try:
        sock = _spawn._connect(_spawn.find_socket_str(profile, None), _timeout())
    except (MeshError, OSError, ValueError):
        return None
    return None if sock is None else Link(sock)


def _timeout() -> float:
    from meshctl._core import env as _env  # loaded by connect() already

    try:
        value = float(_env.get("MESH_HOOK_TIMEOUT") or TIMEOUT)
    except ValueError:
        return TIMEOUT
    return value if 0 < value < 3600 else TIMEOUT


def _error_code(reply: dict[str, object]) -> int | None:
    error = reply.get("error")
    return error.get("code") if isinstance(error, dict) else None


def _result(reply: dict[str, object]) -> dict[str, Any]:
    result = reply.get("result")
    return result if isinstance(result, dict) else {}


class Hook:
    """One event of one Claude Code session."""

    def __init__(self, link: Link, event: dict[str, object]) -> None:
        self.link = link
        self.event = event
        self.pid = agent_pid()
        self.sid = session_id(self.pid)
        cwd = event.get("cwd")
        self.cwd = cwd if isinstance(cwd, str) and os.path.isabs(cwd) else os.getcwd()

    def registration(self) -> tuple[str, dict[str, object]]:
        """The ``session.register`` call for this Claude Code process."""
        from meshctl.cli._git import git_place

        place = git_place(self.cwd)
        params = {"session_id": self.sid, "source": SOURCE, "pid": self.pid,
                  "liveness": "process", "cwd": self.cwd, "repo": place.repo,
                  "branch": place.branch, "worktree": place.worktree, "status": "idle",
                  "model": self.event.get("model")}  # fmt: skip
        return "session.register", {k: v for k, v in params.items() if v not in (None, "")}

    def register(self) -> bool:
        return _registered(self.link.batch([self.registration()])[0])

    def calls(self, calls: list[tuple[str, dict[str, object]]]) -> list[dict[str, object]]:
        """``calls`` for this session; registered first when the daemon has forgotten it."""
        replies = self.link.batch(calls)
        if any(_error_code(r) in _FORGOTTEN for r in replies) and self.register():
            replies = self.link.batch(calls)
        return replies

    def path(self, value: object) -> str | None:
        if not isinstance(value, str) or not value:
            return None
        return os.path.normpath(os.path.join(self.cwd, os.path.expanduser(value)))


def _registered(reply: dict[str, object]) -> bool:
    return bool(_result(reply)) and not _result(reply).get("disabled")


def session_start(h: Hook) -> str | None:
    """Register, and in the same round trip ask who else claims or works here."""
    replies = h.link.batch(
        [h.registration(), ("claim.check", {"resources": [h.cwd], "session_id": h.sid})]
    )
    if not _registered(replies[0]):
        return None
    check = _result(replies[1])
    if not check.get("claims") and not check.get("present"):
        return None
    from meshctl.agent import advice

    note = advice.start_note(h.cwd, check)
    return "\n".join([advice.FRAME, note]) if note else None


def user_prompt(h: Hook) -> str | None:
    from meshctl.agent import advice

    prompt = h.event.get("prompt")
    task = advice.one_line(prompt) if isinstance(prompt, str) else ""
    beat: dict[str, object] = {"session_id": h.sid, "status": "thinking"}
    if task:
        beat["task"] = task
    replies = h.calls([("session.heartbeat", beat),
                       ("message.inbox", {"session_id": h.sid, "peek": True})])  # fmt: skip
    listed = _result(replies[1]).get("items")
    items = [i for i in listed if isinstance(i, dict)] if isinstance(listed, list) else []
    if not items:
        return None
    delivered = advice.delivery(items, mode=MODE)
    ids = [i["id"] for i in items if isinstance(i.get("id"), int)]
    if ids:
        h.link.batch([("message.ack", {"session_id": h.sid, "ids": ids})])
    return str(delivered) or None


def pre_tool(h: Hook) -> str | None:
    tool = h.event.get("tool_name")
    args = h.event.get("tool_input")
    if tool not in WRITE_TOOLS or not isinstance(args, dict):
        return None
    path = h.path(args.get(WRITE_TOOLS[str(tool)]))
    if path is None:
        return None
    replies = h.calls([
        ("session.heartbeat", {"session_id": h.sid, "status": "tool-running", "tools": [tool]}),
        ("claim.check", {"resources": [path], "session_id": h.sid}),
    ])  # fmt: skip
    check = _result(replies[1])
    if not check.get("claims") and not check.get("elsewhere") and not check.get("present"):
        return None
    from meshctl.agent import advice

    said = advice.advise([path], check, told=True)  # presence was said at the start
    return "\n".join([advice.FRAME, said.text]) if said.level == "approve" else None


def post_tool(h: Hook) -> str | None:
    tool = h.event.get("tool_name")
    args = h.event.get("tool_input")
    if not isinstance(args, dict):
        return None
    if tool in WRITE_TOOLS:
        path = h.path(args.get(WRITE_TOOLS[str(tool)]))
        if path:
            h.calls([("board.changed", {"session_id": h.sid, "paths": [path]})])
    elif tool in READ_TOOLS:
        path = h.path(args.get(READ_TOOLS[str(tool)]))
        if path:
            h.calls([("board.touch", {"session_id": h.sid, "paths": [path], "read": True})])
    return None


def stop(h: Hook) -> str | None:
    h.calls([("session.heartbeat", {"session_id": h.sid, "status": "waiting-for-user"})])
    return None


def session_end(h: Hook) -> str | None:
    reason = h.event.get("reason")
    h.link.batch([("session.end", {"session_id": h.sid,
                                   "reason": f"claude code: {reason or 'ended'}"})])  # fmt: skip
    return None


EVENTS = {"SessionStart": session_start, "UserPromptSubmit": user_prompt,
          "PreToolUse": pre_tool, "PostToolUse": post_tool, "Stop": stop,
          "SessionEnd": session_end}  # fmt: skip


def main() -> int:
    """Run the hook for the event on stdin; always exit 0, print only context to add."""
    from meshctl import _conn

    try:
        event = _conn.loads(sys.stdin.buffer.read().decode("utf-8", "replace").strip() or "{}")
    except (OSError, ValueError):
        return 0
    name = event.get("hook_event_name") if isinstance(event, dict) else None
    handler = EVENTS.get(name) if isinstance(name, str) else None
    if handler is None:
        return 0
    link = connect()
    if link is None:
        return 0
    try:
        context = handler(Hook(link, event))
    except Exception:  # the daemon went away or answered oddly: the agent goes on
        return 0
    finally:
        link.sock.close()
    if context:
        out = {"hookSpecificOutput": {"hookEventName": name, "additionalContext": context}}
        sys.stdout.write(_conn.encode_value(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
