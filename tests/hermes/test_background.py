"""Hermes's background agents -- the memory/skill review fork that runs after a turn
under the parent's own session id, and the skill curator -- are not the session: the
plugin leaves the session's status, task and inbox alone while they run. Driven with
Hermes 0.19.0's own AIAgent and review fork against the scripted fake model."""

from __future__ import annotations

import json

import pytest
from tests.conftest import DaemonHandle
from tests.hermes.conftest import RPC, Hermes
from tests.hermes.fake_llm import FakeLLM, Text, content, last

pytestmark = pytest.mark.slow

#: A gateway chat takes a turn; another session sends it a message; Hermes's review
#: fork runs (as AIAgent._spawn_background_review starts it: a thread of its own with
#: the parent's context); then the chat's next turn.
SCRIPT = (
    r"""
import json, os, socket, sys, threading
import model_tools
from run_agent import AIAgent
from agent.background_review import spawn_background_review_thread
from tools.thread_context import propagate_context_to_thread

"""
    + RPC
    + r"""
agent = AIAgent(model="fake-model", base_url=sys.argv[1], api_key="dummy", provider="custom",
                platform="telegram", quiet_mode=True, enabled_toolsets=["mesh"],
                session_id="20261130_220000_aaaabbbb")
S = agent.session_id
first = agent.run_conversation("check the deploy")
sent = rpc("message.send", {"session_id": "cli:peer", "to": S,
                            "text": "the deploy is blocked on review"})["id"]
target, _ = spawn_background_review_thread(agent, first.get("messages") or [],
                                           review_memory=True)
fork = threading.Thread(target=propagate_context_to_thread(target), name="bg-review")
fork.start()
fork.join(120)
during = rpc("session.get", {"session_id": S})
state = rpc("message.status", {"session_id": "cli:peer", "ids": [sent]})["states"][str(sent)]
agent.run_conversation("and now?", conversation_history=first.get("messages"))
print(json.dumps({"after_fork": during, "message": state}))
"""
)


def test_the_review_fork_leaves_the_sessions_status_task_and_inbox_alone(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    daemon.call("session.register", {"session_id": "cli:peer", "task": "watching CI"})
    with FakeLLM(lambda messages: Text("FAKE-FINAL")) as llm:
        hermes.config(llm.url)
        hermes.install()

        done = hermes.python(SCRIPT.replace("sys.argv[1]", repr(llm.url)))

    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    fork = out["after_fork"]
    assert (fork["status"], fork["task"]) == ("waiting-for-user", "check the deploy")
    assert out["message"] != "read", "the fork must not consume the chat's inbox"
    users = [content(last(r["messages"], "user")) for r in llm.requests]
    review = [u for u in users if u.startswith("Review the conversation")]
    assert review, "the review fork ran"
    assert all("blocked on review" not in u for u in review)
    [after] = [u for u in users if u.startswith("and now?")]
    assert "the deploy is blocked on review" in after
