"""Hermes in daily use, through the real hermes-agent 0.19.0: the toolset's cost, warnings
only when they matter, answers that never wait for nothing, /mesh help and sync,
writes made while the daemon was away, cloned profiles."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import DaemonHandle
from tests.hermes.conftest import RPC, Hermes
from tests.hermes.fake_llm import FakeLLM, Text
from tests.support import wait_for

pytestmark = pytest.mark.slow

#: Runs in Hermes's interpreter, in a project folder another session works in: the mesh
#: tools as Hermes sends them, then one turn that writes three files, then /mesh.
DAY = (
    r"""
import json, os, socket, sys
import model_tools
from hermes_cli.plugins import get_plugin_command_handler, invoke_hook
from hermes_cli.plugins import resolve_plugin_command_result as resolve
"""
    + RPC
    + r"""
S = "20261202_010000_dddddd"
defs = [d for d in model_tools.get_tool_definitions(enabled_toolsets=["mesh"], quiet_mode=True)
        if d["function"]["name"].startswith("mesh_")]
sent = json.dumps(defs, ensure_ascii=False, separators=(",", ":"))
invoke_hook("on_session_start", session_id=S, model="m", platform="cli")
first = invoke_hook("pre_llm_call", session_id=S, user_message="add a discount field",
                    is_first_turn=True, task_id="t", turn_id="u", conversation_history=[],
                    model="m", platform="cli", sender_id="")
results = []
for i, name in enumerate(["a.py", "b.py", "c.py"]):
    call = dict(tool_name="write_file", args={"path": name, "content": "x"}, session_id=S,
                task_id="t", tool_call_id=f"c{i}", turn_id="u")
    invoke_hook("pre_tool_call", **call)
    results.append(invoke_hook("transform_tool_result", result='{"ok": true}', **call))
model_tools.handle_function_call("mesh_claim", {"resources": ["a.py"], "reason": "pricing"},
                                 session_id=S, task_id="t")
mesh = get_plugin_command_handler("mesh")
print(json.dumps({"tools": [d["function"]["name"] for d in defs], "tokens": len(sent) // 4,
                  "first": first, "results": results, "help": resolve(mesh("help")),
                  "sync": resolve(mesh("sync"))}), flush=True)
"""
)


def test_a_day_in_a_shared_project(daemon: DaemonHandle, hermes: Hermes) -> None:
    """Seven tools for at most 600 tokens (13 for about 1,460 before); three writes beside
    a session that is merely present: one short informational line, no approval asked
    (three warnings before); /mesh help exists; /mesh sync shows the caller's claims."""
    proj = hermes.home.parent
    daemon.call("session.register", {"session_id": "cli:docs", "task": "writing the docs",
                                     "cwd": str(proj), "branch": "main"})  # fmt: skip
    hermes.install()

    done = hermes.python(DAY)

    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(out["tools"]) == 7
    assert out["tokens"] <= 600, out["tokens"]
    said = [out["first"][0]["context"] if out["first"] else "", *map(str, out["results"])]
    text = "\n".join(said)
    assert text.count("cli:docs (writing the docs, branch main)") == 1, said
    assert "get their approval" not in text
    assert "warning" not in text
    assert out["results"][1:] == [[], []], "nothing more this turn"
    assert out["help"].startswith("/mesh — Session Mesh")
    assert "/mesh sync" in out["help"]
    assert f"Your claims: file:{proj / 'a.py'} — pricing" in out["sync"]


FULL = r"""
import json, model_tools
defs = model_tools.get_tool_definitions(enabled_toolsets=["mesh"], quiet_mode=True)
sent = json.dumps(defs, ensure_ascii=False, separators=(",", ":"))
print(json.dumps({"tools": len(defs), "tokens": len(sent) // 4}))
"""


def test_the_full_set_is_a_config_switch_away(daemon: DaemonHandle, hermes: Hermes) -> None:
    hermes.config(extra="plugins:\n  entries:\n    meshd:\n      tools: full\n")
    hermes.install()

    done = hermes.python(FULL)

    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["tools"] == 13
    assert out["tokens"] > 1000


#: A chat whose model has no mesh tools (``-t terminal``), mid-turn: its model request
#: is held by the test. It prints "ready" once the plugin's responder answers for it.
NO_TOOLS = r"""
import sys, threading, time
import model_tools
from run_agent import AIAgent
import hermes_plugins.meshd._plugin as plugin

agent = AIAgent(model="fake-model", base_url=sys.argv[1], api_key="dummy", provider="custom",
                platform="cli", quiet_mode=True, enabled_toolsets=["terminal"],
                session_id=sys.argv[2])
turn = threading.Thread(target=agent.run_conversation, args=("B: migrating billing",))
turn.start()
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    rt = plugin._RUNTIMES.get("rt")
    if rt is not None and sys.argv[2] in rt.responding:
        break
    time.sleep(0.05)
print("ready", flush=True)
turn.join()
"""


def test_a_question_to_a_chat_without_mesh_tools_gets_its_status_at_once(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    """It was handed the question with "answer with mesh_reply", a tool it does not have,
    and the asker waited its whole timeout (timed_out) for the status answer."""
    sid = "20261202_011000_eeeeee"
    busy, release = threading.Event(), threading.Event()

    def on_request(body: dict[str, Any]) -> None:
        busy.set()
        release.wait(60)

    with FakeLLM(lambda messages: Text("B-DONE")) as llm:
        llm.on_request = on_request
        hermes.config(llm.url)
        hermes.install()
        proc = subprocess.Popen(
            [str(hermes.bin / "python"), "-c", NO_TOOLS, llm.url, sid],
            env=hermes.environ(True), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, cwd=hermes.home.parent,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            assert busy.wait(60), "the chat never reached its model"
            daemon.call("session.register", {"session_id": "cli:asker"})
            asked = daemon.call("query.ask", {"session_id": "cli:asker", "to": sid,
                                              "question": "status?", "timeout": 30})  # fmt: skip
        finally:
            release.set()
            _, err = proc.communicate(timeout=120)

    assert proc.returncode == 0, err[-3000:]
    answer = asked["result"]
    assert (answer["answered_by"], answer["timed_out"]) == ("status", False), answer
    assert "without the mesh tools" in answer["answer"]
    assert "B: migrating billing" in answer["answer"]


IDLE = (
    r"""
import json, os, socket, sys, time
import model_tools
from hermes_cli.plugins import invoke_hook
import hermes_plugins.meshd._plugin as plugin
"""
    + RPC
    + r"""
S = "20261202_012000_ffffff"
turn = dict(task_id="t", turn_id="u", conversation_history=[], model="m", platform="cli",
            sender_id="")
invoke_hook("on_session_start", session_id=S, model="m", platform="cli")
invoke_hook("pre_llm_call", session_id=S, user_message="tidy the changelog",
            is_first_turn=True, **turn)
invoke_hook("on_session_end", session_id=S, completed=True, interrupted=False, model="m",
            platform="cli", task_id="t", turn_id="u")
rt = plugin._RUNTIMES["rt"]
deadline = time.monotonic() + 60
while S not in rt.responding and time.monotonic() < deadline:
    time.sleep(0.05)
rpc("session.register", {"session_id": "cli:asker"})
print(json.dumps(rpc("query.ask", {"session_id": "cli:asker", "to": S, "question": "busy?",
                                   "timeout": 30})), flush=True)
"""
)


def test_the_instant_reply_for_an_idle_chat_is_marked_as_its_status(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    hermes.install()

    done = hermes.python(IDLE)

    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert (answer["answered_by"], answer["timed_out"]) == ("status", False), answer
    assert "waiting-for-user: tidy the changelog" in answer["answer"]
    assert "passed on" in answer["answer"]


#: A write made while the daemon is stopped, then the daemon back: the write is on the
#: board. stdin says when to write and when to end.
DOWN_WRITE = r"""
import sys, time
import model_tools
from hermes_cli.plugins import invoke_hook
import hermes_plugins.meshd._plugin as plugin
S = "20261202_013000_aaaaaa"
invoke_hook("on_session_start", session_id=S, model="m", platform="cli")
print("registered", flush=True)
sys.stdin.readline()
call = dict(tool_name="write_file", args={"path": "while-down.py", "content": "x"},
            session_id=S, task_id="t", tool_call_id="c", turn_id="u")
invoke_hook("pre_tool_call", **call)
invoke_hook("post_tool_call", result='{"ok": true}', status="ok", duration_ms=1, **call)
print("written", flush=True)
sys.stdin.readline()
"""


def test_a_write_made_while_the_daemon_was_down_is_reported_when_it_is_back(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    target = hermes.home.parent / "while-down.py"
    hermes.install()
    proc = subprocess.Popen(
        [str(hermes.bin / "python"), "-c", DOWN_WRITE], env=hermes.environ(True),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=hermes.home.parent,
    )  # fmt: skip
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "registered"
        daemon.stop()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "written"
        daemon.start()

        def on_board() -> Any:
            found = daemon.call("board.changes", {"project_or_path": str(target)})
            return [e["path"] for e in found.get("result", {}).get("entries", [])]

        board = wait_for(on_board, timeout=90, what="the write on the board")
    finally:
        proc.stdin.write("done\n")
        proc.stdin.flush()
        _, err = proc.communicate(timeout=60)

    assert proc.returncode == 0, err[-3000:]
    assert board == [str(target)]


def test_status_and_doctor_name_a_cloned_profile_and_the_fix(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    """`hermes profile create --clone` copies config.yaml (meshd enabled) but not the
    plugin folder: that profile is silently off the mesh."""
    root = Path(hermes.env["HOME"]) / ".hermes"
    hermes.env["HERMES_HOME"] = str(root)
    root.mkdir()
    (root / "config.yaml").write_text((hermes.home / "config.yaml").read_text())
    hermes.install()
    clone = root / "profiles" / "worker"
    clone.mkdir(parents=True)
    (clone / "config.yaml").write_text((root / "config.yaml").read_text())

    status = hermes.meshctl("hermes", "status")
    listed = json.loads(hermes.meshctl("hermes", "status", "--all-profiles", "--json").stdout)
    doctor = hermes.meshctl("doctor")

    assert status.returncode == 0, status.stderr
    assert "worker: `meshctl hermes install --profile worker`" in status.stdout
    assert [r["hermes_profile"] for r in listed if r["missing_folder"]] == ["worker"]
    assert "Hermes worker enables the meshd plugin but has no plugin folder" in doctor.stdout
    assert "meshctl hermes install --profile worker" in doctor.stdout


def test_an_interactive_cli_is_on_the_mesh_before_its_first_message(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    """`hermes chat` under a terminal, no message typed: Hermes fires no hook until the
    first message, so the session was invisible until then; now it registers as soon
    as Hermes made the CLI, waiting for its user."""
    import os
    import pty
    import signal

    hermes.install()
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [str(hermes.bin / "hermes"), "chat", "-t", "mesh"], env=hermes.environ(True),
        stdin=follower, stdout=follower, stderr=follower, cwd=hermes.home.parent,
        start_new_session=True,
    )  # fmt: skip
    os.close(follower)
    drained: list[bytes] = []
    reader = threading.Thread(target=lambda: _drain(leader, drained), daemon=True)
    reader.start()
    try:

        def cli_sessions() -> list[dict[str, Any]]:
            listed = daemon.call("session.list")["result"]["sessions"]
            return [s for s in listed if s["source"] == "cli"]

        [session] = wait_for(
            cli_sessions, timeout=240,
            what=lambda: f"the CLI on the mesh; its terminal: {b''.join(drained)[-3000:]!r}",
        )  # fmt: skip
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)
        os.close(leader)
        reader.join(10)

    assert session["status"] == "waiting-for-user"
    assert session["task"] == ""


def _drain(fd: int, into: list[bytes]) -> None:
    """Read the terminal's output so Hermes never blocks writing to it."""
    import os

    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return
        if not chunk:
            return
        into.append(chunk)
