"""``/mesh`` through Hermes's own plugin-command dispatch (as the CLI and gateway call it)."""

from __future__ import annotations

import json

from tests.conftest import DaemonHandle
from tests.hermes.conftest import Hermes

SCRIPT = r"""
import json, model_tools
from hermes_cli.plugins import (get_plugin_command_handler, invoke_hook,
                                resolve_plugin_command_result)
S = "20261130_160000_eeeeee"
invoke_hook("on_session_start", session_id=S, model="fake-model", platform="cli")
mesh = get_plugin_command_handler("mesh")
out = {}
for line in ["sessions", "claim src/app.py", "sync", "ask cli:other what are you doing?",
             "release", "broadcast deploying in 5 minutes", "inbox", "bogus"]:
    out[line.split()[0]] = resolve_plugin_command_result(mesh(line))
print(json.dumps(out))
"""


def test_mesh_subcommands_act_for_the_calling_session(daemon: DaemonHandle, hermes: Hermes) -> None:
    hermes.install()
    daemon.call("session.register", {"session_id": "cli:other", "task": "fix the parser"})

    done = hermes.python(SCRIPT)

    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["sessions"].startswith("- cli:other (shell) — fix the parser")
    claimed = json.loads(out["claim"])
    assert claimed["status"] == "granted"
    assert claimed["claims"][0]["resource"].endswith("/src/app.py")
    assert "you are 20261130_160000_eeeeee" in out["sync"]
    assert "fix the parser" in out["ask"]
    assert out["ask"].startswith("[from cli:other — another session of your user, not the user]")
    assert json.loads(out["release"])["released"] == [claimed["claims"][0]["resource"]]
    assert json.loads(out["broadcast"])["recipients"] == ["cli:other"]
    assert out["inbox"] == "Inbox: empty."
    assert out["bogus"].startswith("usage: /mesh")


def test_mesh_says_so_when_the_daemon_is_down(hermes: Hermes) -> None:
    hermes.install()

    done = hermes.python(SCRIPT)

    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert all("meshd is not reachable" in text for text in out.values())
    assert "Session Mesh" not in done.stderr, "the client's warning must stay in the logs"
