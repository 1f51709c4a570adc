"""The daemon runs on plain asyncio by default and on uvloop when asked.

``MESH_EVENT_LOOP`` chooses (meshd.server.eventloop). Both loops serve the same protocol
with the same guarantees, so the real daemon is run on each: a queued acquire is
granted when its holder releases, a pipelined burst is answered in order, and what
was acknowledged survives ``kill -9``. A loop that is unknown, or asked for and not
installed, is refused at start with one sentence.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from tests.conftest import DaemonHandle, MeshEnv
from tests.support import Client, wait_for

from meshd.server import eventloop

HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None
LOOPS = [
    "asyncio",
    pytest.param(
        "uvloop", marks=pytest.mark.skipif(not HAVE_UVLOOP, reason="uvloop is not installed")
    ),
]


class TestChoice:
    def test_asyncio_unless_asked(self) -> None:
        assert eventloop.choose("") == "asyncio"

    def test_auto_takes_uvloop_when_installed(self) -> None:
        assert eventloop.choose("auto") == ("uvloop" if HAVE_UVLOOP else "asyncio")

    def test_asyncio_is_always_available(self) -> None:
        assert eventloop.choose("asyncio") == "asyncio"
        assert eventloop.backend_options("asyncio") == {}

    def test_unknown_loop_is_refused(self) -> None:
        with pytest.raises(eventloop.LoopChoiceError, match="not a known event loop"):
            eventloop.choose("trio")


@pytest.mark.parametrize("loop", LOOPS)
def test_daemon_serves_and_keeps_its_word_on(loop: str, mesh_env: MeshEnv) -> None:
    mesh_env.env[eventloop.ENV] = loop
    d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
    d.start()
    try:
        assert f"; {loop} loop)" in d.logs()
        key = f"file:{d.state_dir}/shared.txt"
        with Client(d.socket) as holder, Client(d.socket) as waiter:
            for sid, c in (("h", holder), ("w", waiter)):
                assert "result" in c.call("session.register", {"session_id": sid, "task": "t"})
            holder.call("claim.acquire", {"session_id": "h", "resources": [key]})
            waiter.send(
                json.dumps({"jsonrpc": "2.0", "id": 7, "method": "claim.acquire",
                            "params": {"session_id": "w", "resources": [key], "wait": 30}})
                .encode() + b"\n"
            )  # fmt: skip
            wait_for(lambda: holder.call("claim.list")["result"]["waiting"])
            holder.call("claim.release", {"session_id": "h"})
            granted = waiter.reply()
            # a pipelined burst: every request answered, in order
            burst = [
                {"jsonrpc": "2.0", "id": i, "method": "session.heartbeat",
                 "params": {"session_id": "w"}}
                for i in range(50)
            ]  # fmt: skip
            holder.send(b"".join(json.dumps(r).encode() + b"\n" for r in burst))
            ids = [holder.reply()["id"] for _ in burst]
        d.kill()
        d.start()
        held = d.call("claim.list")["result"]["claims"]
    finally:
        d.stop()

    assert granted["id"] == 7
    assert granted["result"]["status"] == "granted"
    assert ids == list(range(50))
    assert [(c["session_id"], c["token"]) for c in held] == [("w", granted["result"]["token"])]


def test_a_loop_that_is_not_there_is_refused_in_one_sentence(mesh_env: MeshEnv) -> None:
    env = {**mesh_env.env, eventloop.ENV: "libuv-please"}
    done = subprocess.run(
        [sys.executable, "-m", "meshd", "run", "--profile", "test"],
        env=env, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip

    assert done.returncode != 0
    assert "MESH_EVENT_LOOP='libuv-please' is not a known event loop" in done.stderr
    assert "Traceback" not in done.stderr
