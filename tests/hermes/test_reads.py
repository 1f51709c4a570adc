"""What a Hermes chat reads reaches the board (SPEC §7 ``board touch --read``), so a
file it read and another session then changes is told to it at its next turn.

Driven through Hermes 0.19.0's own agent loop (``AIAgent.run_conversation``, its
``read_file``/``search_files`` tools, its hook dispatch) against the scripted model
on loopback and the test's real meshd; the chat lives across turns in one Hermes
process, the test says when the next turn starts.
"""

from __future__ import annotations

import calendar
import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import DaemonHandle
from tests.hermes.conftest import RPC, Hermes
from tests.hermes.fake_llm import FakeLLM, Move, Text, Tool, content, last
from tests.support import wait_for

pytestmark = pytest.mark.slow

SID = "20261201_190000_abcdef"

#: One chat, turn after turn: each line on stdin is the user's next message ("quit"
#: ends); after each turn the script prints "turn". Before a turn it waits until the
#: plugin's link to the daemon is not paused (a turn right after the daemon came back).
CHAT = r"""
import sys, time
import model_tools
from run_agent import AIAgent
import hermes_plugins.meshd._plugin as plugin

agent = AIAgent(model="fake-model", base_url=sys.argv[1], api_key="dummy", provider="custom",
                platform="cli", quiet_mode=True, enabled_toolsets=["mesh", "file"],
                session_id=sys.argv[2])
history = None
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "quit":
        break
    rt = plugin._RUNTIMES["rt"]
    deadline = time.monotonic() + 60
    while rt.link.down and time.monotonic() < deadline:
        time.sleep(0.05)
    done = agent.run_conversation(line.strip(), conversation_history=history)
    history = done.get("messages")
    print("turn", flush=True)
"""


def plan_script(messages: list[dict[str, Any]]) -> Move:
    """The user's message (first line) is a JSON list of [tool, args]: call them in
    order, then answer DONE."""
    first = content(last(messages, "user")).split("\n", 1)[0]
    plan = json.loads(first) if first.startswith("[") else []
    i = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    done = sum(1 for m in messages[i:] if m.get("role") == "tool")
    if done < len(plan):
        name, args = plan[done]
        return Tool(name, args)
    return Text("DONE")


class Chat:
    """The Hermes process running CHAT, one turn per :meth:`turn`."""

    def __init__(self, proc: subprocess.Popen[str], llm: FakeLLM) -> None:
        self.proc = proc
        self.llm = llm

    def turn(self, *calls: tuple[str, dict[str, Any]]) -> str:
        """One turn whose model makes ``calls``; the user's message it was sent."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        said = json.dumps([list(c) for c in calls])
        self.proc.stdin.write(said + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:  # Hermes prints its tool progress lines too
            if line.strip() == "turn":
                break
        else:
            raise AssertionError(self.stderr())
        first = next(
            r for r in self.llm.requests if content(last(r["messages"], "user")).startswith(said)
        )
        return content(last(first["messages"], "user"))

    def tool_results(self) -> list[str]:
        return self.llm.tool_messages()

    def stderr(self) -> str:
        self.proc.kill()
        return self.proc.communicate(timeout=30)[1][-3000:]


@contextmanager
def chat(hermes: Hermes, cwd: Path) -> Iterator[Chat]:
    """A Hermes chat (session SID) working in ``cwd``, with the file and mesh tools."""
    with FakeLLM(plan_script) as llm:
        hermes.config(llm.url)
        hermes.install()
        env = {**hermes.environ(True), "TERMINAL_CWD": str(cwd)}
        proc = subprocess.Popen(
            [str(hermes.bin / "python"), "-c", CHAT, llm.url, SID], env=env, cwd=cwd,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        assert proc.stdin is not None
        try:
            assert proc.stdout.readline().strip() == "ready", proc.communicate(timeout=30)[1]
            yield Chat(proc, llm)
            proc.stdin.write("quit\n")
            proc.stdin.flush()
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)


def marks(daemon: DaemonHandle, folder: Path) -> dict[str, str]:
    """path -> when SID's read of it was recorded (board.show's marks under ``folder``)."""
    shown = daemon.call("board.show", {"project_or_path": str(folder)})["result"]
    return {m["path"]: m["at"] for m in shown["watching"] if m["session_id"] == SID}


@pytest.fixture
def place(hermes: Hermes) -> tuple[Path, Path]:
    """(the chat's working folder, a project beside it with src/auth.py and src/db.py)."""
    notes = hermes.home.parent / "notes"
    src = hermes.home.parent / "proj" / "src"
    notes.mkdir()
    src.mkdir(parents=True)
    (src / "auth.py").write_text("def login():\n    return True\n")
    (src / "db.py").write_text("URL = 'sqlite://'\n")
    return notes, src


def test_a_file_the_chat_read_and_another_session_changes_is_told_at_its_next_turn(
    daemon: DaemonHandle, hermes: Hermes, place: tuple[Path, Path]
) -> None:
    """The chat works elsewhere (it is not present in the project): only its read of
    auth.py, a path relative to its folder, makes it a recipient. Before, the plugin
    recorded no read, so the change was told to nobody."""
    notes, src = place
    daemon.call("session.register", {"session_id": "cli:other", "task": "rework the login"})
    with chat(hermes, notes) as c:
        c.turn(("read_file", {"path": "../proj/src/auth.py"}))
        assert "def login" in c.tool_results()[0], "the tool read the file"
        wait_for(lambda: str(src / "auth.py") in marks(daemon, src), timeout=60,
                 what=lambda: marks(daemon, src))  # fmt: skip

        told = hermes.meshctl("board", "changed", str(src / "auth.py"), "--session",
                              "cli:other", "--summary", "login returns a token now")  # fmt: skip
        assert told.returncode == 0, told.stderr
        assert SID in told.stdout, told.stdout
        said = c.turn()

    context = said.split("[Session Mesh]", 1)[1]
    assert "cli:other changed auth.py — login returns a token now" in context
    assert "not from the user" in context


def test_a_file_read_again_is_not_recorded_again_and_a_searched_folder_never(
    daemon: DaemonHandle, hermes: Hermes, place: tuple[Path, Path]
) -> None:
    """A board.touch is a durable write: the second read of auth.py sends none (its
    mark keeps the first read's time). A search over a folder is no read of it; a
    search naming one file is. The marks are sent in the order the reads happened, so
    once db.py's shows, a second touch of auth.py or of the folder would have too."""
    notes, src = place
    auth, db = str(src / "auth.py"), str(src / "db.py")
    with chat(hermes, notes) as c:
        c.turn(("read_file", {"path": auth}))
        first = wait_for(lambda: marks(daemon, src).get(auth), timeout=60,
                         what=lambda: marks(daemon, src))  # fmt: skip
        # Marks are shown to the second: a second touch now would show a later time.
        recorded = calendar.timegm(time.strptime(first, "%Y-%m-%dT%H:%M:%SZ"))
        while time.time() < recorded + 1.05:
            time.sleep(0.05)

        c.turn(("read_file", {"path": auth}),
               ("search_files", {"pattern": "def", "path": str(src)}),
               ("search_files", {"pattern": "URL", "path": db}))  # fmt: skip
        wait_for(lambda: db in marks(daemon, src), timeout=60, what=lambda: marks(daemon, src))
        seen = marks(daemon, src)

    assert seen == {auth: first, db: seen[db]}
    assert seen[db] > first


def test_daemon_down_the_read_works_and_is_recorded_once_the_daemon_is_back(
    daemon: DaemonHandle, hermes: Hermes, place: tuple[Path, Path]
) -> None:
    """Failing open: with meshd stopped under the chat, the tool reads as without the
    plugin; the sender keeps the read it could not record and records it once meshd is
    back, with no second read (before, it was dropped, and a second read was recorded
    only if the plugin's link had noticed the daemon back first)."""
    notes, src = place
    auth, db = str(src / "auth.py"), str(src / "db.py")
    with chat(hermes, notes) as c:
        c.turn(("read_file", {"path": db}))
        wait_for(lambda: db in marks(daemon, src), timeout=60, what=lambda: marks(daemon, src))
        daemon.stop()

        c.turn(("read_file", {"path": auth}))
        assert "def login" in c.tool_results()[-1], "the read works with meshd stopped"
        daemon.start()
        wait_for(lambda: auth in marks(daemon, src), timeout=60, what=lambda: marks(daemon, src))


#: A Hermes process with the plugin loaded; ``read(i, path)`` runs the hooks of a
#: read_file of ``path`` that succeeded, in session ``S`` (started by the script).
READER = (
    r"""
import json, os, socket, sys, time
import model_tools
from hermes_cli.plugins import invoke_hook
import hermes_plugins.meshd._plugin as plugin
import hermes_plugins.meshd._reads as reads
"""
    + RPC
    + r"""
def read(i, path):
    invoke_hook("post_tool_call", tool_name="read_file", args={"path": path},
                result='{"content": "1|x"}', task_id="t", session_id=S, tool_call_id=f"c{i}",
                turn_id="u", api_request_id="r", duration_ms=0, status="ok", error_type=None,
                error_message=None, middleware_trace=[])
"""
)

BOUNDED = (
    READER
    + r"""
S = "20261201_200000_bbbbbb"
invoke_hook("on_session_start", session_id=S, model="m", platform="cli")
n = reads.MAX_PATHS + 50
for i in range(n):
    read(i, f"/srv/app/m{i}.py")
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    shown = rpc("board.show", {"project_or_path": "/srv/app"})["watching"]
    if len(shown) == n:
        break
    time.sleep(0.1)
t = plugin._RUNTIMES["rt"].sessions[S]
print(json.dumps({"n": n, "recorded": len(shown), "remembered": len(t.reads),
                  "max": reads.MAX_PATHS, "first": "/srv/app/m0.py" in t.reads,
                  "last": f"/srv/app/m{n - 1}.py" in t.reads}))
"""
)


def test_a_sessions_remembered_reads_are_bounded_and_every_read_is_recorded(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    """A gateway runs for weeks: a session keeps at most MAX_PATHS paths (oldest
    forgotten first); reads beyond that are still all recorded."""
    hermes.install()

    done = hermes.python(BOUNDED)

    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert doc["recorded"] == doc["n"]
    assert doc["remembered"] == doc["max"]
    assert (doc["first"], doc["last"]) == (False, True)


REFUSED = (
    READER
    + r"""
S = "20261201_200000_cccccc"
invoke_hook("on_session_start", session_id=S, model="m", platform="cli")
rt = plugin._RUNTIMES["rt"]
rt.sender.stop()  # no sending thread: the two reads below go in one flush, in this thread
for i, path in enumerate(["/srv/app/tab\there.py", "/srv/app/auth.py"]):
    read(i, path)
rt.flush()
shown = rpc("board.show", {"project_or_path": "/srv/app"})["watching"]
print(json.dumps(sorted(m["path"] for m in shown if m["session_id"] == S)))
"""
)


def test_a_read_the_daemon_refuses_costs_no_other_read_sent_with_it(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    """Reads noted together go in one board.touch, which the daemon refuses whole for
    one path it takes for no key (a file name with a tab): the other reads are still
    recorded, not kept back for an hour as if they had been."""
    hermes.install()

    done = hermes.python(REFUSED)

    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["/srv/app/auth.py"]
