"""Hooks fired by Hermes's own dispatcher, with Hermes 0.19.0's real kwargs, move a
session through the daemon's registry (one Hermes subprocess per scenario)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.conftest import DaemonHandle, MeshEnv
from tests.hermes.conftest import RPC, Hermes
from tests.support import wait_for

#: Runs in Hermes's interpreter: fires the hooks exactly as agent/, cli.py and
#: tools/delegate_tool.py do in 0.19.0, and prints the registry after each step.
SCRIPT = (
    r"""
import json, os, socket, sys, time
import model_tools
from hermes_cli.plugins import invoke_hook

"""
    + RPC
    + r"""
def snap(step):
    rows = {s["session_id"]: s for s in rpc("session.list")["sessions"]}
    print(json.dumps({"step": step, "sessions": rows}), flush=True)

S, C = sys.argv[1], sys.argv[2]
turn = dict(task_id="t-1", turn_id="turn-1", conversation_history=[], model="fake-model",
            platform=PLATFORM, sender_id="")
invoke_hook("on_session_start", session_id=S, model="fake-model", platform=PLATFORM)
snap("start")
invoke_hook("pre_llm_call", session_id=S, user_message="refactor the auth module\nplease",
            is_first_turn=True, **turn)
snap("pre_llm")
invoke_hook("pre_tool_call", tool_name="terminal", args={"command": "pytest"}, session_id=S,
            task_id="t-1", tool_call_id="call-1", turn_id="turn-1", api_request_id="r-1",
            middleware_trace=[])
snap("pre_tool")
invoke_hook("post_llm_call", session_id=S, task_id="t-1", turn_id="turn-1",
            user_message="refactor", assistant_response="done", conversation_history=[],
            model="fake-model", platform=PLATFORM)
invoke_hook("on_session_end", session_id=S, task_id="t-1", turn_id="turn-1", completed=True,
            interrupted=False, model="fake-model", platform=PLATFORM)
snap("turn_end")
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    me = {s["session_id"]: s for s in rpc("session.list")["sessions"]}.get(S)
    if me is None or me["last_heartbeat"] > me["last_activity"]:
        break
    time.sleep(0.1)
snap("idle_beat")
invoke_hook("subagent_start", parent_session_id=S, parent_turn_id="turn-1",
            parent_subagent_id=None, child_session_id=C, child_subagent_id="sa-0-1",
            child_role="leaf", child_goal="look something up")
invoke_hook("on_session_start", session_id=C, model="fake-model", platform="subagent")
snap("child")
invoke_hook("subagent_stop", parent_session_id=S, child_session_id=C,
            child_subagent_id="sa-0-1", child_status="completed", child_summary="ok")
snap("child_done")
invoke_hook("on_session_finalize", session_id=S, platform=PLATFORM, reason="shutdown")
snap("final")
"""
)


def run_hooks(
    h: Hermes, daemon: DaemonHandle, platform: str = "cli", sid: str = "20261130_120000_aaaaaa"
) -> dict[str, Any]:
    child = "20261130_120001_bbbbbb"
    code = f"import sys; PLATFORM = {platform!r}\n" + SCRIPT
    done = h.python(f"import sys; sys.argv = ['x', {sid!r}, {child!r}]\n" + code)
    assert done.returncode == 0, done.stderr[-3000:] + daemon.logs()[-5000:]
    steps = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {s["step"]: s["sessions"] for s in steps}


@pytest.fixture
def fast_beats(mesh_env: MeshEnv) -> None:
    mesh_env.write_config("[defaults]\nheartbeat_interval = 0.3\n")


class TestLifecycle:
    def test_a_cli_session_moves_through_the_registry(
        self, fast_beats: None, daemon: DaemonHandle, hermes: Hermes
    ) -> None:
        hermes.install()
        sid, child = "20261130_120000_aaaaaa", "20261130_120001_bbbbbb"

        steps = run_hooks(hermes, daemon, sid=sid)

        start = steps["start"][sid]
        assert (start["source"], start["status"], start["model"]) == ("cli", "idle", "fake-model")
        assert start["liveness"] == "heartbeat"
        assert steps["pre_llm"][sid]["status"] == "thinking"
        assert steps["pre_llm"][sid]["task"] == "refactor the auth module please"
        assert steps["pre_tool"][sid]["status"] == "tool-running"
        assert steps["pre_tool"][sid]["tools"] == ["terminal"]
        assert steps["turn_end"][sid]["status"] == "waiting-for-user"
        assert sid in steps["idle_beat"], daemon.logs()[-5000:]
        idle = steps["idle_beat"][sid]
        assert idle["last_heartbeat"] > idle["last_activity"], "heartbeats must not move activity"
        assert steps["child"][child]["source"] == "subagent"
        assert steps["child"][child]["parent"] == sid
        assert child not in steps["child_done"]
        assert steps["final"] == {}

    def test_a_gateway_session_is_named_after_its_platform(
        self, daemon: DaemonHandle, hermes: Hermes
    ) -> None:
        hermes.install()

        steps = run_hooks(hermes, daemon, platform="telegram")

        [start] = steps["start"].values()
        assert start["source"] == "gateway:telegram"
        [after] = steps["turn_end"].values()
        assert after["status"] == "waiting-for-user"

    def test_cron_and_kanban_sources(self, daemon: DaemonHandle, hermes: Hermes) -> None:
        hermes.install()
        cron = run_hooks(hermes, daemon, platform="cron", sid="cron_daily_20261130")
        hermes.env["HERMES_KANBAN_TASK"] = "t_42"

        kanban = run_hooks(hermes, daemon, sid="20261130_130000_cccccc")

        assert cron["start"]["cron_daily_20261130"]["source"] == "cron"
        assert "cron_daily_20261130" not in cron["turn_end"], "a cron run is over at its end"
        k = kanban["start"]["20261130_130000_cccccc"]
        assert (k["source"], k["kanban_task"]) == ("kanban", "t_42")


RESUMED = r"""
import json, model_tools
from hermes_cli.plugins import invoke_hook
invoke_hook("pre_llm_call", session_id="20261130_090000_resume", task_id="t", turn_id="u",
            user_message="continue", conversation_history=[{"role": "user", "content": "x"}],
            is_first_turn=False, model="fake-model", platform="cli", sender_id="")
print(json.dumps(json.loads(model_tools.handle_function_call(
    "mesh_sessions", {}, session_id="20261130_090000_resume", task_id="t"))))
"""


def test_a_resumed_session_registers_at_its_first_hook(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    """on_session_start never fires on --resume: the first hook with the id registers it."""
    hermes.install()
    daemon.call("session.register", {"session_id": "cli:other", "task": "fix the parser"})

    done = hermes.python(RESUMED)

    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["you"] == "20261130_090000_resume"
    assert [s["task"] for s in seen["sessions"]] == ["fix the parser"]
    assert "not from the user" in seen["framing"], "their tasks are their words"


NEXT_TURN = r"""
import json, os, socket, model_tools
from hermes_cli.plugins import invoke_hook

def rpc(method, params):
    import hermes_plugins.meshd._plugin as plugin
    plugin._RUNTIMES["rt"].flush()  # what the hooks noted is sent first
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(os.environ["MESH_SOCKET"])
        s.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method,
                              "params": params}).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            buf += s.recv(65536)
    return json.loads(buf)

S = "20261130_140000_dddddd"
invoke_hook("on_session_start", session_id=S, model="fake-model", platform=PLATFORM)
rpc("message.send", {"session_id": "cli:other", "to": S, "text": "tests are red on main"})
# waiting: the plugin has it (a message pushed a moment before a hook, not yet taken in
# by the plugin's responder thread, reaches the model at the hook after)
import time, hermes_plugins.meshd._plugin as plugin
rt, deadline = plugin._RUNTIMES["rt"], time.monotonic() + 60
while rt.view.in_sync(rt.sessions[S]) and not rt.view.held(S) and time.monotonic() < deadline:
    time.sleep(0.01)
turn = dict(session_id=S, task_id="t", turn_id="u", user_message="hi", conversation_history=[],
            is_first_turn=True, model="fake-model", platform=PLATFORM, sender_id="")
print(json.dumps(invoke_hook("pre_llm_call", **turn)))
print(json.dumps(invoke_hook("pre_llm_call", **turn)))
print(json.dumps(rpc("session.get", {"session_id": S})["result"]))
"""


def test_waiting_messages_reach_the_next_turn_framed_once(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    hermes.install()
    daemon.call("session.register", {"session_id": "cli:other", "task": "watching CI"})

    done = hermes.python("PLATFORM = 'cli'\n" + NEXT_TURN)

    assert done.returncode == 0, done.stderr[-3000:]
    first, second, _ = (json.loads(line) for line in done.stdout.strip().splitlines()[-3:])
    [ctx] = first
    assert ctx["context"].startswith("[Session Mesh]")
    assert "not from the user" in ctx["context"]
    assert "cli:other" in ctx["context"]
    assert "tests are red on main" in ctx["context"]
    assert second == [], "a delivered message is acknowledged, not delivered again"


def test_group_chats_get_no_mesh_context(daemon: DaemonHandle, hermes: Hermes) -> None:
    """A multi-party gateway chat: pre_gateway_dispatch marks it; nothing is delivered."""
    hermes.install()
    daemon.call("session.register", {"session_id": "cli:other", "task": "watching CI"})
    code = NEXT_TURN.replace(
        'invoke_hook("on_session_start"',
        GROUP_DISPATCH + '\ninvoke_hook("on_session_start"',
    )

    done = hermes.python("PLATFORM = 'telegram'\n" + code)

    assert done.returncode == 0, done.stderr[-3000:]
    first, _, group = (json.loads(line) for line in done.stdout.strip().splitlines()[-3:])
    assert first == []
    assert group["source"] == "gateway:telegram"
    assert group["accept_messages"] is False
    assert group["task"] == ""


#: Builds a real gateway SessionStore entry for a Telegram group whose session id is S,
#: and fires pre_gateway_dispatch with Hermes's own MessageEvent, as the gateway does.
GROUP_DISPATCH = r"""
import pathlib, tempfile
from gateway.config import GatewayConfig, Platform
from gateway.session import SessionSource, SessionStore
from gateway.platforms.base import MessageEvent
store = SessionStore(pathlib.Path(tempfile.mkdtemp()), GatewayConfig())
src = SessionSource(platform=Platform("telegram"), chat_id="-100123", user_id="u1",
                    chat_type="group")
entry = store.get_or_create_session(src)
S = entry.session_id
class Gateway:
    def _session_key_for_source(self, source):
        return entry.session_key
invoke_hook("pre_gateway_dispatch", event=MessageEvent(text="hi all", source=src),
            gateway=Gateway(), session_store=store)
"""


FORGOTTEN = (
    NEXT_TURN.split("S = ", maxsplit=1)[0]
    + r"""
S = "20261130_170000_ffffff"
invoke_hook("on_session_start", session_id=S, model="fake-model", platform="cli")
rpc("session.end", {"session_id": S, "reason": "ended"})
invoke_hook("pre_llm_call", session_id=S, task_id="t", turn_id="u", user_message="go on",
            conversation_history=[], is_first_turn=False, model="fake-model", platform="cli",
            sender_id="")
print(json.dumps(rpc("session.get", {"session_id": S})["result"]))
print(json.dumps(model_tools.handle_function_call("mesh_claim", {"resources": ["a.txt"]},
                                                  session_id=S, task_id="t")))
invoke_hook("on_session_finalize", session_id=S, platform="cli", reason="shutdown")
print(json.dumps(rpc("claim.list", {})["result"]))
"""
)


def test_a_session_the_daemon_forgot_registers_again_and_finalize_releases(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    """Ended behind Hermes's back (or lost by the daemon): the next hook registers it again
    and reports its status; on_session_finalize then ends it and frees its claims."""
    hermes.install()

    done = hermes.python(FORGOTTEN)

    assert done.returncode == 0, done.stderr[-3000:]
    session, claim, claims = (json.loads(x) for x in done.stdout.strip().splitlines()[-3:])
    assert (session["status"], session["task"]) == ("thinking", "go on")
    assert json.loads(claim)["status"] == "granted"
    assert claims["claims"] == []


LOST_MID_HOOK = (
    NEXT_TURN.split("S = ", maxsplit=1)[0]
    + r"""
import hermes_plugins.meshd._plugin as plugin
rt = plugin._RUNTIMES["rt"]
S = "20261130_170500_eeeeee"
invoke_hook("on_session_start", session_id=S, model="fake-model", platform="cli")
stale = rt.sessions[S].epoch
rpc("session.end", {"session_id": S, "reason": "ended"})
# The responder finds out between a hook's registration check and its report (it runs on
# its own thread): the report itself must bring the session back.
rt.forget(S)
rt.report(S, status="thinking", task="go on")
rt.flush()
# ... and its word about the first registration, late, does not undo the second.
rt.forget(S, stale)
print(json.dumps(rt.sessions[S].registered))
print(json.dumps(rpc("session.get", {"session_id": S}).get("result")))
"""
)


def test_a_session_lost_between_a_hooks_check_and_its_report_registers_again(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    """The daemon's loss is learnt on another thread while a hook runs: the hook's status
    report registers the session again at once, not at the next heartbeat minutes on."""
    hermes.install()

    done = hermes.python(LOST_MID_HOOK)

    assert done.returncode == 0, done.stderr[-3000:]
    registered, session = (json.loads(x) for x in done.stdout.strip().splitlines()[-2:])
    assert session is not None, "the report did not register the session again"
    assert registered is True, "a late word about an earlier registration undid this one"
    assert (session["status"], session["task"]) == ("thinking", "go on")


TTL = (
    NEXT_TURN.split("S = ", maxsplit=1)[0]
    + r"""
import time
S = "20261130_180000_aaaaab"
turn = dict(session_id=S, task_id="t", turn_id="u", user_message="go", conversation_history=[],
            is_first_turn=False, model="fake-model", platform="cli", sender_id="")
invoke_hook("pre_llm_call", **turn)
model_tools.handle_function_call("mesh_claim", {"resources": ["b.txt"], "ttl_s": 6},
                                 session_id=S, task_id="t")
before = rpc("claim.list", {"session_id": S})["result"]["claims"][0]["expires_in_s"]
time.sleep(2.2)  # past a third of the ttl: the next turn is activity that refreshes it
invoke_hook("pre_llm_call", **turn)
after = rpc("claim.list", {"session_id": S})["result"]["claims"][0]["expires_in_s"]
print(json.dumps([before, after]))
"""
)


def test_a_tool_claim_has_a_ttl_that_activity_refreshes(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    """So an idle gateway chat does not hold a file for days, and a busy one keeps it."""
    hermes.install()

    done = hermes.python(TTL)

    assert done.returncode == 0, done.stderr[-3000:]
    before, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert 0 < before <= 6
    assert after > before - 2.2 + 1, "the second turn re-armed the ttl"


DOWN_TURN = r"""
import json, sys, model_tools
from hermes_cli.plugins import invoke_hook
A, B = "20261130_200000_aaaaaaaa", "20261130_200001_bbbbbbbb"
invoke_hook("on_session_start", session_id=A, model="m", platform="telegram")
print("registered", flush=True)
sys.stdin.readline()  # the daemon is stopped now
turn = dict(task_id="t", turn_id="u", conversation_history=[], model="m", platform="telegram")
invoke_hook("on_session_start", session_id=B, model="m", platform="telegram")
invoke_hook("pre_llm_call", session_id=B, user_message="how is the deploy going?",
            is_first_turn=True, sender_id="", **turn)
invoke_hook("on_session_end", session_id=B, completed=True, interrupted=False, **turn)
print("turned", flush=True)
sys.stdin.readline()  # the test has seen B come back
"""


def test_a_turn_taken_while_the_daemon_was_down_shows_once_it_is_back(
    fast_beats: None, daemon: DaemonHandle, hermes: Hermes
) -> None:
    """A gateway chat answers while meshd is stopped; when meshd is back, the plugin's
    heartbeat thread registers that chat as it is (waiting for its user, with its
    request as task), not as a blank idle session."""
    hermes.install()
    proc = subprocess.Popen(
        [str(hermes.bin / "python"), "-c", DOWN_TURN], env=hermes.environ(True),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "registered"
        daemon.stop()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "turned"
        daemon.start()

        def b() -> Any:
            return daemon.call("session.get", {"session_id": "20261130_200001_bbbbbbbb"}).get(
                "result"
            )

        back = wait_for(b, timeout=60, what="the chat registered again")
    finally:
        proc.stdin.write("done\n")
        proc.stdin.flush()
        _, err = proc.communicate(timeout=60)

    assert proc.returncode == 0, err[-3000:]
    assert (back["source"], back["status"]) == ("gateway:telegram", "waiting-for-user")
    assert back["task"] == "how is the deploy going?"


HUNG = r"""
import json, sys, time, model_tools
from hermes_cli.plugins import invoke_hook
import hermes_plugins.meshd._client as client
import hermes_plugins.meshd._plugin as plugin
S = "20261130_210000_cccccc"
invoke_hook("on_session_start", session_id=S, model="m", platform="cli")
print("registered", flush=True)
sys.stdin.readline()  # the daemon is stopped (SIGSTOP): it accepts, it never answers
# a hook that asks the daemon before it returns (the claim check before a write; not
# the inbox a tool result carries: read from the pushed view once that is in sync)
invoke_hook("pre_tool_call", tool_name="write_file", args={"path": "notes.md", "content": "x"},
            session_id=S, task_id="t", tool_call_id="c", turn_id="u")
link = plugin._RUNTIMES["rt"].link
print(json.dumps({"paused_for": link._paused_until - time.monotonic(),
                  "pause": client.PAUSE_AFTER_TIMEOUT}), flush=True)
"""


@contextlib.contextmanager
def daemon_stopped(
    daemon: DaemonHandle, hermes: Hermes, script: str, ready: str
) -> Iterator[subprocess.Popen[str]]:
    """Run ``script`` in Hermes's interpreter; once it prints ``ready``, stop the daemon
    (SIGSTOP: it accepts, it never answers) and let the script go on (a line on its
    stdin). The daemon goes on (SIGCONT) when the block is left; the script is killed
    if the block failed."""
    hermes.install()
    assert daemon.proc is not None
    proc = subprocess.Popen(
        [str(hermes.bin / "python"), "-c", script], env=hermes.environ(True),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == ready
        daemon.proc.send_signal(signal.SIGSTOP)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        yield proc
    except BaseException:
        proc.kill()
        raise
    finally:
        daemon.proc.send_signal(signal.SIGCONT)


def test_a_hung_daemon_costs_one_hook_the_timeout_then_calls_pause(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    """A daemon that accepts and never answers: the hook that waited out the timeout
    pauses every later call for PAUSE_AFTER_TIMEOUT, so the agent loop is not held up
    again a moment later (it was paused 0.5 s only: the client's fail-open turned the
    timeout into "unreachable")."""
    with daemon_stopped(daemon, hermes, HUNG, "registered") as proc:
        assert proc.stdout is not None
        line = proc.stdout.readline()
    _, err = proc.communicate(timeout=60)

    assert proc.returncode == 0, err[-3000:]
    doc = json.loads(line)
    assert doc["paused_for"] > doc["pause"] / 2


SLOW_DAEMON = (
    r"""
import json, os, socket, sys
from hermes_cli.plugins import discover_plugins, invoke_hook
"""
    + RPC
    + r"""
print("ready", flush=True)
sys.stdin.readline()  # the daemon is stopped (SIGSTOP) now, and goes on 1.5 s after
# the plugin connected
discover_plugins()  # the plugin's set-up asks the daemon first
S = "20261130_220000_dddddd"
invoke_hook("on_session_start", session_id=S, model="m", platform="cli")
print(json.dumps([s["session_id"] for s in rpc("session.list")["sessions"]]), flush=True)
"""
)


def sockets(pid: int) -> list[str]:
    """The sockets process ``pid`` has open (Linux: its /proc fd links)."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            if (link := os.readlink(f"/proc/{pid}/fd/{fd}")).startswith("socket:"):
                found.append(link)
    return found


def test_a_daemon_slower_than_the_default_timeout_gets_the_session_with_a_longer_one(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    """MESH_HERMES_TIMEOUT (the fixture sets 10 s) is how long each call of the plugin
    waits: a daemon that answers its set-up 1.5 s late still gets the session at its
    start hook. With the fixed 0.5 s, the set-up's call timed out, the Link paused for
    5 s and the start hook registered nothing -- what a loaded CI machine did to
    TestLifecycle (session missing from session.list)."""
    with daemon_stopped(daemon, hermes, SLOW_DAEMON, "ready") as proc:
        wait_for(lambda: sockets(proc.pid), timeout=60, what="the plugin connecting")
        time.sleep(1.5)  # three default timeouts: the set-up's first call is waiting
    out, err = proc.communicate(timeout=120)

    assert proc.returncode == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1]) == ["20261130_220000_dddddd"]


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(None, 0.5), ("", 0.5), ("3", 3.0), ("0.25", 0.25), ("0", 0.5), ("-1", 0.5),
     ("inf", 0.5), ("nan", 0.5), ("soon", 0.5)],
)  # fmt: skip
def test_the_hook_timeout_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str | None, seconds: float
) -> None:
    from meshctl.hermes import _client

    if value is None:
        monkeypatch.delenv("MESH_HERMES_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("MESH_HERMES_TIMEOUT", value)

    assert _client.hook_timeout() == seconds
    assert _client.Link("default", "/nonexistent.sock").mesh.timeout == seconds


AT_HOME = (
    r"""
import json, os, socket, model_tools
from hermes_cli.plugins import invoke_hook
"""
    + RPC
    + r"""
G = "20261130_230000_aaaaaaaa"
invoke_hook("on_session_start", session_id=G, model="m", platform="telegram")
first = invoke_hook("pre_llm_call", session_id=G, task_id="t", turn_id="u",
                    user_message="what's on my calendar?", conversation_history=[],
                    is_first_turn=True, model="m", platform="telegram", sender_id="")
home = os.environ["HOME"]
print(json.dumps({"me": rpc("session.get", {"session_id": G}), "first": first,
                  "check": rpc("claim.check", {"resources": [home + "/proj/app.py"]})}))
"""
)


def test_a_gateway_chat_at_home_is_not_present_at_every_file_under_it(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    """A Hermes gateway's working folder is the home folder (its terminal.cwd default): a
    chat registered with it as cwd was "working in" every path under home, so every write
    by another session anywhere there was warned about it (and asked for the user's
    approval), and every changed file was a notice in the chat's inbox; its first turn
    listed every session under home as working in its folder."""
    hermes.install()
    home = hermes.env["HOME"]
    hermes.env["TERMINAL_CWD"] = home
    daemon.call("session.register", {"session_id": "cli:proj", "task": "fix the parser",
                                     "cwd": f"{home}/proj"})  # fmt: skip

    done = hermes.python(AT_HOME)

    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert doc["me"]["source"] == "gateway:telegram"
    assert doc["me"]["cwd"] is None
    assert [p["session_id"] for p in doc["check"]["present"]] == ["cli:proj"]
    assert doc["first"] == []
