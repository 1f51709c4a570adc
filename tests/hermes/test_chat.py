"""End to end through the real ``hermes chat -q`` (Hermes 0.19.0) against a scripted
fake model on loopback: no LLM, no network. Each run is a Hermes subprocess."""

from __future__ import annotations

import json
import subprocess
import threading
from typing import Any

import pytest
from tests.conftest import DaemonHandle
from tests.hermes.conftest import Hermes
from tests.hermes.fake_llm import FakeLLM, Move, Text, Tool, content, last, one_tool_then_done

pytestmark = pytest.mark.slow


def chat(
    h: Hermes, query: str, toolsets: str = "mesh", **kw: Any
) -> subprocess.CompletedProcess[str]:
    return h.run("chat", "-Q", "-q", query, "-t", toolsets, **kw)


def other_session(daemon: DaemonHandle, sid: str, task: str, **fields: Any) -> None:
    """A session of the same user that is not Hermes (as `meshctl register` makes one)."""
    reply = daemon.call("session.register", {"session_id": sid, "task": task, **fields})
    assert "result" in reply, reply


def live(daemon: DaemonHandle) -> dict[str, dict[str, Any]]:
    return {s["session_id"]: s for s in daemon.call("session.list")["result"]["sessions"]}


def test_a_chat_run_is_on_the_mesh_while_it_runs_and_sees_other_sessions(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    """While the model thinks, the run is in `sessions active`; the model's mesh_sessions
    result lists the other session's task; after the run it is gone."""
    other_session(daemon, "cli:parser-1f3a9c", "fix the parser")
    seen: list[dict[str, dict[str, Any]]] = []
    with FakeLLM(one_tool_then_done("mesh_sessions", {})) as llm:
        llm.on_request = lambda body: seen.append(live(daemon))
        hermes.config(llm.url)
        hermes.install()

        done = chat(hermes, "who else is working?")

    assert done.returncode == 0, done.stderr[-3000:]
    assert "FAKE-FINAL" in done.stdout
    mine = [s for s in seen[0].values() if s["session_id"] != "cli:parser-1f3a9c"]
    assert [(s["source"], s["status"]) for s in mine] == [("cli", "thinking")]
    assert mine[0]["task"] == "who else is working?"
    compact = {"mesh_sessions", "mesh_ask", "mesh_msg", "mesh_claim", "mesh_notes",
               "mesh_signal", "mesh_once"}  # fmt: skip
    assert {t for t in llm.tool_names() if t.startswith("mesh_")} == compact
    [result] = llm.tool_messages()
    listed = json.loads(result)["sessions"]
    assert [(s["session_id"], s["task"]) for s in listed] == [
        ("cli:parser-1f3a9c", "fix the parser")
    ]
    assert set(live(daemon)) == {"cli:parser-1f3a9c"}


def test_a_write_to_a_claimed_file_warns_naming_that_sessions_task(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    target = hermes.home.parent / "proj" / "auth.py"
    target.parent.mkdir()
    other_session(daemon, "cli:auth-77aa01", "refactor the auth flow")
    claim = daemon.call(
        "claim.acquire", {"session_id": "cli:auth-77aa01", "resources": [f"file:{target}"]}
    )
    assert claim["result"]["status"] == "granted"
    script = one_tool_then_done("write_file", {"path": str(target), "content": "x = 1\n"})
    with FakeLLM(script) as llm:
        hermes.config(llm.url)
        hermes.install()

        done = chat(hermes, "write auth.py", toolsets="mesh,file")

    assert done.returncode == 0, done.stderr[-3000:]
    [result] = llm.tool_messages()
    assert "[Session Mesh warning]" in result
    assert "cli:auth-77aa01" in result
    assert "refactor the auth flow" in result
    assert "not from the user" in result
    assert target.read_text() == "x = 1\n", "advisory: the write still happens"
    changes = daemon.call("board.changes", {"project_or_path": str(target)})["result"]
    assert [e["path"] for e in changes["entries"]] == [str(target)]


def test_daemon_down_the_chat_runs_as_without_the_plugin(hermes: Hermes) -> None:
    """No meshd: the run completes, and the model is not offered the mesh tools."""
    with FakeLLM(lambda messages: Text("FAKE-FINAL")) as llm:
        hermes.config(llm.url)
        hermes.install()

        done = chat(hermes, "hello", toolsets="mesh,file")

    assert done.returncode == 0, done.stderr[-3000:]
    assert "FAKE-FINAL" in done.stdout
    assert "Session Mesh" not in done.stdout + done.stderr
    offered = llm.tool_names()
    assert "write_file" in offered
    assert not [t for t in offered if t.startswith("mesh_")]


def test_two_chats_a_asks_b_and_bs_answer_reaches_as_model(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    """B is mid-turn and its model never gets to answer; A lists the mesh, asks B, and the
    status responder's answer (from what B's hooks reported) reaches A's model when A's
    wait runs out: an ask never hangs."""
    b_busy, b_release = threading.Event(), threading.Event()

    def script(messages: list[dict[str, Any]]) -> Move:
        first_user = content(next(m for m in messages if m.get("role") == "user"))
        if first_user.startswith("B:"):
            return Text("B-DONE")
        tool = last(messages, "tool")
        if tool is None:
            return Tool("mesh_sessions", {})
        doc = json.loads(content(tool).split("\n\n[Session Mesh]")[0])
        if "sessions" in doc:
            [b] = [s for s in doc["sessions"] if s["task"].startswith("B:")]
            question = {"to": b["session_id"], "question": "what are you doing?", "wait_s": 1}
            return Tool("mesh_ask", question)
        return Text("A-DONE")

    def on_request(body: dict[str, Any]) -> None:
        if content(last(body["messages"], "user")).startswith("B:"):
            b_busy.set()
            b_release.wait(60)

    with FakeLLM(script) as llm:
        llm.on_request = on_request
        hermes.config(llm.url)
        hermes.install()
        b = subprocess.Popen(
            [str(hermes.bin / "hermes"), "chat", "-Q", "-q", "B: migrating the billing database",
             "-t", "mesh"], env=hermes.environ(True), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert b_busy.wait(60), "B never reached its model"
            a = chat(hermes, "ask B what it is doing")
        finally:
            b_release.set()
            b_out, b_err = b.communicate(timeout=60)

    assert a.returncode == 0, a.stderr[-3000:]
    assert b.returncode == 0, b_err[-3000:]
    assert "A-DONE" in a.stdout
    assert "B-DONE" in b_out
    answer = json.loads(llm.tool_messages()[-1].split("\n\n[Session Mesh]")[0])
    assert (answer["answered_by"], answer["timed_out"]) == ("status", True)
    assert "thinking" in answer["answer"]
    assert "B: migrating the billing database" in answer["answer"]
    assert "not from the user" in answer["framing"]


def test_b_answers_as_question_mid_turn_with_mesh_reply(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    """B's model is at work (calling tools); A asks it; the question reaches B's model in
    its next tool result, naming the tool B has (the compact set's mesh_msg), B answers
    with it, and A's model gets B's own words."""

    def script(messages: list[dict[str, Any]]) -> Move:
        first_user = content(next(m for m in messages if m.get("role") == "user"))
        tool = content(last(messages, "tool"))
        if first_user.startswith("B:"):
            if "question #" in tool:
                qid = int(tool.split("question #")[1].split(":")[0])
                answer = {"action": "reply", "id": qid, "text": "migrating billing, 40% done"}
                return Tool("mesh_msg", answer)
            if '"query_id"' in tool:
                return Text("B-DONE")
            return Tool(
                "mesh_msg", {"action": "inbox"}
            )  # B keeps working (one tool call after another)
        if not tool:
            return Tool("mesh_sessions", {})
        doc = json.loads(tool.split("\n\n[Session Mesh]")[0])
        if "sessions" in doc:
            [b] = [s for s in doc["sessions"] if s["task"].startswith("B:")]
            return Tool("mesh_ask", {"to": b["session_id"], "question": "status?", "wait_s": 30})
        return Text("A-DONE")

    def on_request(body: dict[str, Any]) -> None:
        if content(last(body["messages"], "user")).startswith("B:"):
            b_busy.set()
            stop.wait(0.2)  # B's model "thinks" a little between tool calls

    b_busy, stop = threading.Event(), threading.Event()
    with FakeLLM(script) as llm:
        llm.on_request = on_request
        hermes.config(llm.url)
        hermes.install()
        b = subprocess.Popen(
            [str(hermes.bin / "hermes"), "chat", "-Q", "-q", "B: migrating the billing database",
             "-t", "mesh"], env=hermes.environ(True), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert b_busy.wait(60), "B never reached its model"
            a = chat(hermes, "ask B how it is going")
        finally:
            _, b_err = b.communicate(timeout=120)

    assert a.returncode == 0, a.stderr[-3000:]
    assert b.returncode == 0, b_err[-3000:]
    asked = [m for m in llm.tool_messages() if '"answered_by"' in m]
    answer = json.loads(asked[-1].split("\n\n[Session Mesh]")[0])
    assert (answer["answered_by"], answer["timed_out"]) == ("session", False)
    assert answer["answer"] == "migrating billing, 40% done"
    shown = next(m for m in llm.tool_messages() if "question #" in m)
    assert "another session of your user, not the user" in shown
    assert "status?" in shown
    assert "(answer with mesh_msg action=reply id=" in shown


def test_safe_mode_does_not_load_the_plugin(daemon: DaemonHandle, hermes: Hermes) -> None:
    seen: list[dict[str, dict[str, Any]]] = []
    with FakeLLM(lambda messages: Text("FAKE-FINAL")) as llm:
        llm.on_request = lambda body: seen.append(live(daemon))
        hermes.config(llm.url)
        hermes.install()
        hermes.env["HERMES_SAFE_MODE"] = "1"

        done = chat(hermes, "hello")

    assert done.returncode == 0, done.stderr[-3000:]
    assert seen == [{}]
    assert not [t for t in llm.tool_names() if t.startswith("mesh_")]


def test_a_message_sent_mid_turn_reaches_the_model_in_the_next_tool_result(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    other_session(daemon, "cli:ops-5d5d5d", "deploying the gateway")
    sent: list[int] = []

    def on_request(body: dict[str, Any]) -> None:
        if sent:
            return
        [me] = [s for s in live(daemon) if s != "cli:ops-5d5d5d"]
        reply = daemon.call("message.send", {"session_id": "cli:ops-5d5d5d", "to": me,
                                             "text": "please leave src/app.py alone"})  # fmt: skip
        sent.append(reply["result"]["id"])

    with FakeLLM(one_tool_then_done("mesh_sessions", {})) as llm:
        llm.on_request = on_request
        hermes.config(llm.url)
        hermes.install()

        done = chat(hermes, "look around")

    assert done.returncode == 0, done.stderr[-3000:]
    [result] = llm.tool_messages()
    delivered = result.split("\n\n", 1)[1]
    assert delivered.startswith("[Session Mesh]")
    assert "not from the user" in delivered
    assert (
        f"[from cli:ops-5d5d5d — another session of your user, not the user] message #{sent[0]}: please leave src/app.py alone"
        in delivered
    )
    states = daemon.call("message.status", {"session_id": "cli:ops-5d5d5d", "ids": sent})
    assert states["result"]["states"] == {str(sent[0]): "read"}


def test_the_first_turn_in_a_folder_others_work_in_says_who_is_there(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    project = hermes.home.parent / "shop"
    project.mkdir()
    other_session(daemon, "cli:shop-0a0a0a", "upgrading the payment SDK", cwd=str(project),
                  branch="feat/sdk")  # fmt: skip
    with FakeLLM(lambda messages: Text("FAKE-FINAL")) as llm:
        hermes.config(llm.url)
        hermes.install()

        done = chat(hermes, "add a discount field", cwd=project)

    assert done.returncode == 0, done.stderr[-3000:]
    said = content(last(llm.requests[0]["messages"], "user"))
    assert said.startswith("add a discount field")
    context = said.split("[Session Mesh]", 1)[1]
    assert "not from the user" in context
    assert "cli:shop-0a0a0a" in context
    assert "upgrading the payment SDK" in context
    assert "feat/sdk" in context
