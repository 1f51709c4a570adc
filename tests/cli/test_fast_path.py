"""The hot commands' fast path prints what click prints: both ways, compared.

``check``, ``claim``, ``release``, ``heartbeat``, ``sessions active``, ``register``
and ``end`` run without click (:mod:`meshctl.cli._fast`; click alone costs more than BENCH.md's start-up
target). Each command line below runs twice against the same real daemon, as a
user's ``meshctl`` runs it (``meshctl.cli.main``: the fast path first) and through
the click tree alone (``meshctl.cli._root.cli``), and stdout, stderr and the exit
code must match. Only what differs between two runs by nature is masked: claim
tokens and handoff numbers (each run takes the next one), generated session ids,
times and ages.

Each run also reports whether click was loaded, so a case meant for the fast path
proves it was taken (and a comparison of click with itself cannot pass for one),
and a case the fast path must leave to click (help, usage errors, values click
refuses) proves it did.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from .conftest import Run

# The user's way: the console script's main() (fast path, then click). Writes at
# exit whether click was imported to the file named by argv[1].
_MAIN = """
import atexit, sys
out = sys.argv.pop(1)
def dump():
    with open(out, "w") as f:
        f.write("click" if "click" in sys.modules else "-")
atexit.register(dump)
sys.argv[0] = "meshctl"
from meshctl.cli import main
main()
"""
# The click tree alone: what ``main`` did before the fast path existed.
_CLICK = """
import sys
sys.argv[0] = "meshctl"
from meshctl.cli._root import cli
cli.main(prog_name="meshctl")
"""

_MASKS = (
    (re.compile(r"\bgen-\w+:\d{8}-[0-9a-f]{6}\b"), "GENERATED-ID"),
    (re.compile(r"token \d+"), "token N"),
    (re.compile(r'"(token|handoff_id)": \d+'), r'"\1": N'),
    (re.compile(r"handoff #\d+"), "handoff #N"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "TIME"),
    (re.compile(r"\b\d\d:\d\d\b"), "HH:MM"),
    (re.compile(r'"(age_s|idle_s|expires_in_s|waited_s)": [0-9.e+-]+'), r'"\1": N'),
    (re.compile(r"\b\d+[smhd]( ago|\b)"), r"N\1"),
)


def _masked(text: str) -> str:
    for pattern, repl in _MASKS:
        text = pattern.sub(repl, text)
    return text


def _run(code: str, args: list[str], env: dict[str, str], probe: Path | None) -> Run:
    argv = [sys.executable, "-c", code, *([str(probe)] if probe else []), *args]
    done = subprocess.run(argv, env=env, capture_output=True, timeout=60, check=False)
    out = done.stdout.decode("utf-8", "surrogateescape")
    err = done.stderr.decode("utf-8", "surrogateescape")
    return Run(list(args), done.returncode, out, err)


def _user_way(args: list[str], env: dict[str, str]) -> tuple[Run, bool]:
    """Run as the ``meshctl`` script does; also whether click was loaded."""
    fd, name = tempfile.mkstemp(prefix="fast-")
    os.close(fd)
    probe = Path(name)
    try:
        run = _run(_MAIN, args, env, probe)
        return run, probe.read_text() == "click"
    finally:
        probe.unlink()


def _compare(mine: Run, theirs: Run) -> None:
    assert mine.code == theirs.code, f"{mine}\n---- click:\n{theirs}"
    assert _masked(mine.out) == _masked(theirs.out), f"{mine}\n---- click:\n{theirs}"
    assert _masked(mine.err) == _masked(theirs.err), f"{mine}\n---- click:\n{theirs}"


def assert_same(args: list[str], env: dict[str, str], *, fast: bool | None) -> Run:
    """Run ``args`` both ways; same exit code, stdout and stderr (masked). ``fast``:
    whether the user's way must have skipped click (None: either)."""
    mine, loaded = _user_way(args, env)
    _compare(mine, _run(_CLICK, args, env, None))
    if fast is not None:
        assert loaded is not fast, f"click {'loaded' if loaded else 'not loaded'}: {mine}"
    return mine


def assert_same_cycle(cycle: list[list[str]], env: dict[str, str]) -> None:
    """The whole cycle the user's way, then click's, so both start from the same board;
    each step the same both ways, and each taken by the fast path."""
    mine = [_user_way(args, env) for args in cycle]
    theirs = [_run(_CLICK, args, env, None) for args in cycle]
    for (run, loaded), other in zip(mine, theirs, strict=True):
        _compare(run, other)
        assert not loaded, f"click loaded: {run}"


def _register(daemon: Any, task: str) -> str:
    reply = daemon.call(
        "session.register",
        {"task": task, "source": "cli", "cwd": "/tmp", "pid": os.getpid(), "liveness": "process"},
    )
    return str(reply["result"]["session_id"])


@pytest.fixture
def sessions(daemon: Any) -> dict[str, Any]:
    """Two live sessions (``me``, ``other``: it holds ``res:held``) and envs for them."""
    me = _register(daemon, "refactor the parser — café ✓")
    other = _register(daemon, "owns res:held")
    reply = daemon.call(
        "claim.acquire",
        {"session_id": other, "resources": ["res:held"], "reason": "nightly import"},
    )
    assert reply["result"]["status"] == "granted", reply
    env = {**daemon.env, "MESH_SESSION": me}
    bare = {k: v for k, v in daemon.env.items() if k != "MESH_SESSION"}
    return {"me": me, "other": other, "env": env, "bare": bare}


FAST_READS = [
    ["check", "res:free"],
    ["check", "res:held"],
    ["check", "--json", "res:held"],
    ["--json", "check", "res:free", "res:held"],
    ["check", "res:held", "--all-profiles"],
    ["check", "relative/path", "/abs/path", "file:rel"],
    ["sessions", "active"],
    ["sessions", "active", "--json"],
    ["--json", "sessions", "active", "--fresh"],
    ["sessions", "--json", "active", "--all-profiles"],
    ["--profile", "test", "sessions", "active", "--profile=test"],
    ["heartbeat"],
    ["heartbeat", "--json"],
    ["heartbeat", "--status", "thinking", "--task", "new task"],
    ["heartbeat", "--status=tool-running", "--task=tests"],
]


@pytest.mark.parametrize("args", FAST_READS, ids=" ".join)
def test_reads_and_heartbeats(args: list[str], sessions: dict[str, Any]) -> None:
    assert_same(args, sessions["env"], fast=True)


@pytest.mark.parametrize(
    "cycle",
    [
        [["claim", "res:a"], ["release", "res:a"]],
        [["claim", "--json", "res:a", "res:b"], ["release", "--json"]],
        [["claim", "res:s", "--shared", "--reason", "why", "--ttl", "30"], ["release", "res:s"]],
        [["claim", "res:w", "--wait", "0.5", "--ttl=1e3"], ["release", "res:w", "res:nothing"]],
        [["claim", "res:held"], ["release", "res:held"]],
        [["claim", "res:held", "--wait", "0.2", "--json"], ["release"]],
        [["claim", "file:/", "--broad"], ["release", "file:/"]],
        [["claim", "file:/"], ["release"]],
    ],
    ids=lambda c: " / ".join(" ".join(a) for a in c),
)
def test_claim_release_cycles(cycle: list[list[str]], sessions: dict[str, Any]) -> None:
    assert_same_cycle(cycle, sessions["env"])


@pytest.mark.parametrize(
    "args",
    [
        ["heartbeat"],  # no session: NO_SESSION, exit 1
        ["claim", "res:x"],
        ["release"],
        ["--json", "heartbeat"],
    ],
)
def test_refusals_without_a_session(args: list[str], sessions: dict[str, Any]) -> None:
    assert_same(args, sessions["bare"], fast=True)


def test_unknown_session(sessions: dict[str, Any]) -> None:
    env = {**sessions["bare"], "MESH_SESSION": "cli:gone"}
    for args in (["heartbeat"], ["claim", "res:x", "--json"], ["release", "res:x"]):
        assert_same(args, env, fast=True)


def test_daemon_refuses_a_typed_value(sessions: dict[str, Any]) -> None:
    """The daemon refuses an over-long --reason (TOO_LARGE, SPEC §4, naming the field):
    the same refusal both ways."""
    run = assert_same(["claim", "res:r", "--reason", "x" * 300], sessions["env"], fast=None)
    assert run.code == 1
    assert "reason is over its limit of 200 characters" in run.err


def test_untrusted_socket_folder(sessions: dict[str, Any], short_tmp: Path) -> None:
    """A socket in a folder others may write: refused before connecting (exit 69)."""
    folder = short_tmp / "open"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    env = {**sessions["env"], "MESH_SOCKET": str(folder / "x.sock")}
    run = assert_same(["check", "res:x"], env, fast=True)
    assert run.code == 69


def test_ascii_stdout(sessions: dict[str, Any]) -> None:
    """A misconfigured (ASCII) stdout: click re-wraps it as UTF-8, and so does the fast
    path, by handing that write to click.echo."""
    env = {**sessions["env"], "PYTHONIOENCODING": "ascii"}
    run = assert_same(["sessions", "active"], env, fast=None)
    assert "café" in run.out


LEFT_TO_CLICK = [
    ["claim"],  # RES… is required
    ["check"],
    ["heartbeat", "extra"],
    ["sessions", "active", "extra"],
    ["claim", "res:x", "--ttl", "nan"],
    ["claim", "res:x", "--ttl", "0"],
    ["claim", "res:x", "--ttl", "31536001"],
    ["claim", "res:x", "--wait", "inf"],
    ["claim", "res:x", "--wait", "31536001"],
    ["claim", "res:x", "--wait", "-1"],
    ["claim", "res:x", "--wait", "soon"],
    ["claim", "res:x", "--reason"],
    ["claim", "res:x", "--shared=yes"],
    ["heartbeat", "--status", "napping"],
    ["heartbeat", "--task", "--json"],
    ["heartbeat", "--status=tool-running", "--task="],  # --task is empty
    ["register", "--task", " "],
    ["--profile", "bad name", "heartbeat"],
    ["--socket", "relative.sock", "check", "res:x"],
    ["check", "--help"],
    ["-h"],
    ["--version"],
    ["sessions"],
    ["sessions", "show"],
    ["chek", "res:x"],
    ["check", "--", "res:x"],
    ["check", "-", "res:x"],
    ["check", "res:x", "--all"],
    ["claim", "res:\udcff"],
]


@pytest.mark.parametrize("args", LEFT_TO_CLICK, ids=repr)
def test_left_to_click(args: list[str], sessions: dict[str, Any]) -> None:
    assert_same(args, sessions["env"], fast=False)


def test_env_values_click_refuses(sessions: dict[str, Any]) -> None:
    for var, value in (("MESH_PROFILE", "no/slash"), ("MESH_SOCKET", "rel.sock")):
        assert_same(["heartbeat"], {**sessions["env"], var: value}, fast=False)


def test_debug_and_completion_are_clicks(sessions: dict[str, Any]) -> None:
    assert_same(["heartbeat"], {**sessions["env"], "MESHCTL_DEBUG": "1"}, fast=False)
    env = {**sessions["env"], "_MESHCTL_COMPLETE": "bash_complete", "COMP_WORDS": "meshctl che"}
    env["COMP_CWORD"] = "1"
    assert_same([], env, fast=False)


def test_explicit_session_and_socket(sessions: dict[str, Any], daemon: Any) -> None:
    """--session and --socket on the command line beat the environment."""
    env = {**sessions["bare"], "MESH_SESSION": "cli:gone"}
    me, sock = sessions["me"], str(daemon.socket)
    cycle = [
        ["--session", me, "heartbeat"],
        ["heartbeat", f"--session={me}", "--socket", sock],
        ["--socket", "/nowhere/x.sock", "claim", "res:e", "--socket", sock, "--session", me],
        ["release", "--session", me, "res:e"],
    ]
    assert_same_cycle(cycle, env)


def test_reader_gone(sessions: dict[str, Any]) -> None:
    """stdout's reader left before anything was written: exit 1, nothing on stderr
    (click's handling of EPIPE), both ways."""
    results = []
    for code in (_MAIN, _CLICK):
        fd, name = tempfile.mkstemp(prefix="fast-")
        os.close(fd)
        read, write = os.pipe()
        extra = [name] if code is _MAIN else []
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *extra, "sessions", "active"],
            env=sessions["env"],
            stdout=write,
            stderr=subprocess.PIPE,
        )
        os.close(read)  # no reader left: the first write meets EPIPE
        os.close(write)
        _, err = proc.communicate(timeout=60)
        os.unlink(name)
        results.append((proc.returncode, err))
    assert results[0] == results[1]
    assert results[0][0] == 1


REGISTER_CYCLES = [
    [
        ["register", "--task", "nightly import", "--id", "cron:fp-1", "--liveness", "heartbeat"],
        ["--session", "cron:fp-1", "end"],
    ],
    [
        ["register", "--task=t ✓", "--id=cli:fp-2", "--source", "cron", "--status", "thinking"],
        ["claim", "--session", "cli:fp-2", "res:fp"],
        ["--session=cli:fp-2", "end", "--handoff", "half done; see notes", "--json"],
    ],
    [
        ["register", "--task", "t", "--id", "w:fp-3", "--no-queries", "--no-messages", "--json"],
        ["end", "--session", "w:fp-3"],
        ["end", "--session", "w:fp-3"],
    ],
    [
        ["--json", "register", "--task", "t", "--id", "w:fp-4", "--liveness=heartbeat"],
        ["register", "--task", "t", "--id", "w:fp-4"],  # ID_IN_USE
        ["end", "--session", "w:fp-4"],
    ],
    [
        [
            "register",
            "--task",
            "t",
            "--id",
            "w:fp-5",
            "--liveness",
            "heartbeat",
            "--expire-after",
            "30",
            "--pid",
            "1",
        ],
        ["register", "--task", "child", "--id", "w:fp-6", "--parent", "w:fp-5", "--slot", "a"],
        ["end", "--session", "w:fp-6"],
        ["end", "--session", "w:fp-5"],
    ],
]


@pytest.mark.parametrize("cycle", REGISTER_CYCLES, ids=lambda c: " / ".join(" ".join(a) for a in c))
def test_register_and_end(cycle: list[list[str]], sessions: dict[str, Any]) -> None:
    """A script's whole session, each way in turn (the same ids both ways)."""
    assert_same_cycle(cycle, sessions["bare"])


def test_register_generated_id(sessions: dict[str, Any]) -> None:
    """Without --id the daemon makes one up: only it differs between the two ways."""
    env = sessions["bare"]
    assert_same(["register", "--task", "t", "--source", "gen-a"], env, fast=True)
    assert_same(["register", "--task", "t", "--source", "gen-b", "--json"], env, fast=True)


@pytest.mark.parametrize(
    "args",
    [
        ["register"],
        ["register", "--task", "t", "--slot", "a"],
        ["register", "--task", "t", "--pid", "0"],
        ["register", "--task", "t", "--pid", "1.5"],
        ["register", "--task", "t", "--liveness", "forever"],
        ["register", "--task", "t", "--expire-after", "0"],
        ["register", "--task", "t", "--expire-after", "30"],  # needs --liveness heartbeat
        ["register", "--task", "t", "--status", "napping"],
        ["register", "--task", "t", "extra"],
        ["register", "--task", "t", "--no-queries=1"],
        ["end", "extra"],
        ["end", "--handoff"],
        ["register", "--help"],
    ],
    ids=repr,
)
def test_register_and_end_left_to_click(args: list[str], sessions: dict[str, Any]) -> None:
    assert_same(args, sessions["env"], fast=False)
