"""A real gateway chat: ``hermes gateway run`` with Hermes 0.19.0's local ``api_server``
platform (no network: an OpenAI-compatible endpoint on loopback), the scripted model,
the test's meshd. The chat is on the mesh while its model works, named after its
platform, with the request as its task, and gets the mesh tools."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import urllib.request
from typing import Any

import pytest
from tests.conftest import DaemonHandle
from tests.hermes.conftest import Hermes
from tests.hermes.fake_llm import FakeLLM, Text
from tests.support import wait_for

pytestmark = pytest.mark.slow
KEY = "test-key-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post(port: int, text: str) -> dict[str, Any]:
    body = json.dumps({"model": "hermes", "messages": [{"role": "user", "content": text}]})
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", data=body.encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def test_a_gateway_chat_is_on_the_mesh_while_it_works(daemon: DaemonHandle, hermes: Hermes) -> None:
    port = free_port()
    busy, release = threading.Event(), threading.Event()
    seen: list[dict[str, Any]] = []

    def on_request(body: dict[str, Any]) -> None:
        listed = daemon.call("session.list")["result"]["sessions"]
        seen.extend(s for s in listed if s["source"].startswith("gateway:"))
        busy.set()
        release.wait(120)

    # Without aiohttp (hermes-agent's `messaging` extra) the gateway starts, logs, and
    # never listens: say so at once instead of waiting out the timeout.
    probe = hermes.python("import aiohttp")
    assert probe.returncode == 0, (
        "the gateway's api_server needs aiohttp: install hermes-agent[messaging] "
        f"(scripts/test.sh does): {probe.stderr.strip().splitlines()[-1:]}"
    )
    with FakeLLM(lambda messages: Text("GATEWAY-DONE")) as llm:
        llm.on_request = on_request
        hermes.config(llm.url)
        hermes.install()
        env = {**hermes.environ(True), "API_SERVER_ENABLED": "1",
               "API_SERVER_PORT": str(port), "API_SERVER_KEY": KEY}  # fmt: skip
        gw = subprocess.Popen(
            [str(hermes.bin / "hermes"), "gateway", "run"], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        out: dict[str, Any] = {}
        try:

            def up() -> bool:
                with socket.socket() as s:
                    return s.connect_ex(("127.0.0.1", port)) == 0

            wait_for(up, timeout=300, what="the gateway's api_server")
            asking = threading.Thread(target=lambda: out.update(post(port, "deploy status?")))
            asking.start()
            assert busy.wait(300), "the chat never reached its model"
            release.set()
            asking.join(300)
        finally:
            release.set()
            os.killpg(gw.pid, signal.SIGTERM)
            try:
                gw.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(gw.pid, signal.SIGKILL)
                gw.communicate(timeout=60)

    [chat] = seen
    assert chat["source"] == "gateway:api_server"
    assert (chat["status"], chat["task"]) == ("thinking", "deploy status?")
    assert "GATEWAY-DONE" in json.dumps(out)
    offered = [t for t in llm.tool_names() if t.startswith("mesh_")]
    assert sorted(offered) == sorted(["mesh_sessions", "mesh_ask", "mesh_msg", "mesh_claim",
                                      "mesh_notes", "mesh_signal", "mesh_once"])  # fmt: skip
