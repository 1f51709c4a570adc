"""``/mesh`` through Hermes's own plugin-command dispatch (as the CLI and gateway call it)."""

from __future__ import annotations

import json

from tests.conftest import DaemonHandle
from tests.hermes.conftest import Hermes


def opened(session_id: str) -> str:
    """The start of a script run in Hermes's interpreter: chat ``session_id`` started,
    ``mesh`` its ``/mesh`` handler, ``out`` what the script prints as JSON."""
    return f"""
import json, model_tools
from hermes_cli.plugins import (get_plugin_command_handler, invoke_hook,
                                resolve_plugin_command_result)
S = "{session_id}"
invoke_hook("on_session_start", session_id=S, model="fake-model", platform="cli")
mesh = get_plugin_command_handler("mesh")
out = {{}}
"""


SCRIPT = (
    opened("20261130_160000_eeeeee")
    + r"""
for line in ["sessions", "claim src/app.py", "sync", "ask cli:other what are you doing?",
             "release", "broadcast deploying in 5 minutes", "inbox", "bogus"]:
    out[line.split()[0]] = resolve_plugin_command_result(mesh(line))
note = {"action": "add", "text": "API base is /v2"}
out["notes_add"] = model_tools.handle_function_call("mesh_notes", note, session_id=S, task_id="t")
out["notes_list"] = model_tools.handle_function_call("mesh_notes", {"action": "list"},
                                                     session_id=S, task_id="t")
out["bad"] = model_tools.handle_function_call(
    "mesh_msg", {"action": "send", "to": "nobody", "text": "hi"}, session_id=S, task_id="t")
print(json.dumps(out))
"""
)


def test_mesh_subcommands_act_for_the_calling_session(daemon: DaemonHandle, hermes: Hermes) -> None:
    hermes.install()
    daemon.call("session.register", {"session_id": "cli:other", "task": "fix the parser"})

    done = hermes.python(SCRIPT)

    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["sessions"].startswith("- cli:other (shell) — fix the parser")
    app = hermes.home.parent / "src" / "app.py"
    assert out["claim"].startswith(f"granted file:{app} (token ")
    assert "you are 20261130_160000_eeeeee" in out["sync"]
    assert "fix the parser" in out["ask"]
    assert out["ask"].startswith("[from cli:other — another session of your user, not the user]")
    assert out["release"] == f"released file:{app}"
    assert out["broadcast"] == "sent to 1 session: cli:other"
    assert out["inbox"] == "Inbox: empty."
    assert out["bogus"].startswith("usage: /mesh")
    assert json.loads(out["notes_add"])["session_id"] == "20261130_160000_eeeeee"
    listed = json.loads(out["notes_list"])
    assert [e["text"] for e in listed["entries"]] == ["API base is /v2"]
    assert "not from the user" in listed["framing"]
    bad = json.loads(out["bad"])
    assert bad["code"] == "UNKNOWN_SESSION"
    assert "nobody" in bad["error"]


def test_mesh_says_so_when_the_daemon_is_down(hermes: Hermes) -> None:
    hermes.install()

    done = hermes.python(SCRIPT)

    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    commands = {k: v for k, v in out.items() if k not in ("notes_add", "notes_list", "bad")}
    assert all("meshd is not reachable" in text for text in commands.values())
    assert all("error" in json.loads(out[k]) for k in ("notes_add", "notes_list", "bad"))
    assert "Session Mesh" not in done.stderr, "the client's warning must stay in the logs"


GATEWAY = r"""
import asyncio, json, pathlib, tempfile, model_tools
from gateway.config import GatewayConfig, Platform
from gateway.session import SessionSource, SessionStore
from gateway.platforms.base import MessageEvent
from hermes_cli.plugins import get_plugin_command_handler, invoke_hook

store = SessionStore(pathlib.Path(tempfile.mkdtemp()), GatewayConfig())
chats = [SessionSource(platform=Platform("telegram"), chat_id=c, user_id="u1", chat_type="dm")
         for c in ("111", "222")]
entries = [store.get_or_create_session(src) for src in chats]
for e in entries:
    invoke_hook("on_session_start", session_id=e.session_id, model="m", platform="telegram")

class Gateway:
    def _session_key_for_source(self, source):
        return next(e.session_key for e, s in zip(entries, chats) if s is source)

async def message(source, text):
    # as GatewayRunner._handle_message: the dispatch hook, then the plugin command
    invoke_hook("pre_gateway_dispatch", event=MessageEvent(text=text, source=source),
                gateway=Gateway(), session_store=store)
    return await get_plugin_command_handler("mesh")(text.removeprefix("/mesh "))

async def main():
    return [await message(chats[0], "/mesh sync"), await message(chats[1], "/mesh sync")]

print(json.dumps({"ids": [e.session_id for e in entries], "out": asyncio.run(main())}))
"""


def test_in_the_gateway_mesh_acts_for_the_chat_it_was_typed_in(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    hermes.install()

    done = hermes.python(GATEWAY)

    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    first, second = doc["ids"]
    assert first != second
    assert f"you are {first}" in doc["out"][0]
    assert f"you are {second}" in doc["out"][1]


SHARED = r"""
import json, model_tools
from hermes_cli.plugins import invoke_hook
S = "20261130_190000_abcdef"
invoke_hook("on_session_start", session_id=S, model="fake-model", platform="cli")

def tool(tool_name, **args):
    return json.loads(model_tools.handle_function_call(tool_name, args, session_id=S, task_id="t"))

print(json.dumps({
    "emit": tool("mesh_signal", action="emit", name="data-ready", payload={"rows": 10}),
    "wait": tool("mesh_signal", action="wait", name="data-ready", after=0, wait_s=1),
    "reserve": tool("mesh_once", action="reserve", key="mail:report:2026-11-30"),
    "again": tool("mesh_once", action="reserve", key="mail:report:2026-11-30"),
    "theirs": tool("mesh_once", action="reserve", key="deploy:prod"),
    "done": tool("mesh_once", action="done", key="mail:report:2026-11-30"),
    "post": tool("mesh_board", action="post", kind="pitfall", text="tests need TZ=UTC"),
    "show": tool("mesh_board", action="show"),
    "listed": tool("mesh_once", action="list"),
    "claim": tool("mesh_claim", resources=["res:printer"]),
}))
"""


def test_signal_once_and_board_tools_round_trip(daemon: DaemonHandle, hermes: Hermes) -> None:
    """mesh_signal / mesh_once / mesh_board show up with the daemon methods behind them
    (mesh_board is in the full set: the person turned it on in config.yaml)."""
    hermes.config(extra="plugins:\n  entries:\n    meshd:\n      tools: full\n")
    hermes.install()
    daemon.call("session.register", {"session_id": "cli:deployer", "task": "deploying"})
    taken = daemon.call("once.reserve", {"session_id": "cli:deployer", "key": "deploy:prod"})
    assert taken["result"]["status"] == "reserved"

    done = hermes.python(SHARED)

    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["emit"]["seq"] == 1
    assert (out["wait"]["received"], out["wait"]["payload"]) == (True, {"rows": 10})
    assert out["reserve"]["status"] == "reserved"
    # the caller's own reservation is not "running" (another session acting) but its own
    assert out["again"]["status"] == "reserved by you", out["again"]
    assert out["theirs"]["status"] == "running", "another session's must not run again"
    assert out["done"]["state"] == "done"
    assert "error" not in out["post"], out["post"]
    assert "tests need TZ=UTC" in json.dumps(out["show"])
    # other sessions' words (a signal's payload, a ledger note) come framed
    assert "not from the user" in out["wait"]["framing"]
    assert "not from the user" in out["listed"]["framing"]
    # what happened, not every field that did not (deadlock: false, stolen: [], ...)
    assert out["claim"]["status"] == "granted"
    assert out["claim"]["token"] > 0
    assert not {"deadlock", "stolen", "lost", "withdrawn", "holders"} & set(out["claim"])


PEOPLE = (
    opened("20261130_160500_abcdef")
    + r"""
for line in ["sessions", "sync", "claim src/app.py", "claim src/new.py", "release",
             "broadcast deploying in 5 minutes", "handoff parser done, tests next"]:
    out[line.split()[0] + ("-2" if line.split()[0] in out else "")] = (
        resolve_plugin_command_result(mesh(line)))
print(json.dumps(out))
"""
)


def test_mesh_speaks_to_people_and_lists_sessions_that_hold_claims(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    """/mesh is typed by a person: its answers are sentences, not the tools' JSON, and
    /mesh sessions and sync list a session that holds claims (they raised AttributeError:
    the listing had turned claims into strings, the line read them as objects)."""
    hermes.install()
    app = hermes.home.parent / "src" / "app.py"
    daemon.call("session.register", {"session_id": "cli:other", "task": "fix the parser"})
    held = daemon.call("claim.acquire", {"session_id": "cli:other", "resources": [str(app)],
                                         "reason": "rewriting it"})  # fmt: skip
    assert held["result"]["status"] == "granted", held

    done = hermes.python(PEOPLE)

    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["sessions"].startswith("- cli:other (shell) — fix the parser")
    assert f"holds file:{app}" in out["sessions"]
    assert f"holds file:{app}" in out["sync"]
    assert out["claim"].startswith(f"held: cli:other is editing {app}")
    assert out["claim"].endswith("— rewriting it")
    new = hermes.home.parent / "src" / "new.py"
    assert out["claim-2"].startswith(f"granted file:{new} (token ")
    assert out["release"] == f"released file:{new}"
    assert out["broadcast"] == "sent to 1 session: cli:other"
    assert out["handoff"].startswith("handoff #")
    assert out["handoff"].endswith(" saved")
