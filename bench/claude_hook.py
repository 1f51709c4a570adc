"""One Claude Code hook, whole process, against S (BENCH.md: <= 1.5x S, daemon up or down).

Claude Code starts ``python -S …/meshctl/claude/hook.py`` for every event it is
registered for and waits for it, so the figure is the whole process: interpreter
start, the event read from stdin, the requests, the context printed. Each event is
run as Claude Code would run it (the event's JSON on stdin; this process is the
"Claude Code" the session belongs to), interleaved round by round with S (a stdlib
script that connects, sends one request and prints the reply), after two warm-up
runs each, unpinned as a user runs them and then pinned to one CPU with the daemon.

Rows: the events that run on every turn or tool call (a write nobody else touches,
a write to a file another session claims, which prints the warning; a prompt; a
written path reported; a read recorded), the session's start, and PreToolUse with
the daemon down (its socket gone), which must print nothing.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench import floors
from bench.common import PYTHON, ROOT, LineClient, median, pinning, rpc, start_meshd
from bench.report import spread
from bench.startup import MODES, timed

if TYPE_CHECKING:
    from bench.targets import Ctx

HOOK = ROOT / "src" / "meshctl" / "claude" / "hook.py"
LIMIT = 1.5
CLAIMED = "PreToolUse Write to a claimed file (warning printed)"


def _event(name: str, cwd: Path, **fields: object) -> bytes:
    doc = {"session_id": "bench", "cwd": str(cwd), "hook_event_name": name, **fields}
    return json.dumps(doc).encode()


def _events(cwd: Path) -> dict[str, bytes]:
    write = {"tool_name": "Write", "tool_input": {"file_path": "free.py", "content": "x"}}
    claimed = {"tool_name": "Write", "tool_input": {"file_path": "held.py", "content": "x"}}
    read = {"tool_name": "Read", "tool_input": {"file_path": "free.py"}}
    return {
        "PreToolUse Write, nobody else there": _event("PreToolUse", cwd, **write),
        CLAIMED: _event("PreToolUse", cwd, **claimed),
        "UserPromptSubmit (task, empty inbox)":
            _event("UserPromptSubmit", cwd, prompt="benchmark the hook"),
        "PostToolUse Write (path to the board)": _event("PostToolUse", cwd, **write),
        "PostToolUse Read (read recorded)": _event("PostToolUse", cwd, **read),
        "SessionStart (register, who is here)": _event("SessionStart", cwd, source="startup"),
    }  # fmt: skip


def _hook(stdin: bytes, env: dict[str, str]) -> tuple[float, float, str]:
    """(wall, CPU, stdout) of one hook process fed ``stdin`` (as ``startup.timed``, with
    the event on stdin); it must exit 0 and write nothing on stderr."""
    argv = [PYTHON, "-S", str(HOOK)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(argv, env=env, input=stdin, capture_output=True, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or done.stderr:
        raise RuntimeError(f"the hook exited {done.returncode}: {done.stderr[-400:]!r}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout.decode()


def run(ctx: Ctx) -> None:
    """Against a daemon of its own: this process's session, one other holding a claim."""
    daemon, sock = start_meshd(ctx.place, "claude")
    env = ctx.place.env("claude")
    work = ctx.place.root / "claude-project"
    work.mkdir(exist_ok=True)
    c = LineClient(sock)
    try:
        c.roundtrip(
            rpc(
                "session.register",
                {
                    "session_id": "cli:holder",
                    "source": "cli",
                    "pid": os.getpid(),
                    "task": "holds a file",
                },
            )
        )
        c.roundtrip(rpc("claim.acquire", {"session_id": "cli:holder", "reason": "bench",
                                          "resources": [str(work / "held.py")]}))  # fmt: skip
        events = _events(work)
        _hook(events["SessionStart (register, who is here)"], env)
        down_env = dict(env, MESH_SOCKET=str(ctx.place.root / "run" / "gone.sock"))
        _measure(ctx, daemon.pid, env, down_env, events)
    finally:
        c.close()
        daemon.stop()


def _measure(
    ctx: Ctx, daemon_pid: int, env: dict[str, str], down_env: dict[str, str],
    events: dict[str, bytes],
) -> None:  # fmt: skip
    down = "PreToolUse Write, daemon down (prints nothing)"
    s_env = dict(env)
    runs = {
        "S": lambda: timed(floors.s_argv(), s_env),
        **{k: (lambda b=b: _hook(b, env)) for k, b in events.items()},
        down: lambda: _hook(events["PreToolUse Write, nobody else there"], down_env),
    }
    for _ in range(2):  # warm-up: page cache, .pyc
        for fn in runs.values():
            fn()
    wall: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    printed: dict[str, str] = {}
    for _ in range(ctx.n.proc_n):
        for mode in MODES:
            with pinning(mode, daemon_pid):
                for k, fn in runs.items():
                    w, c, out = fn()
                    wall.setdefault((mode, k), []).append(w)
                    cpu.setdefault((mode, k), []).append(c)
                    printed[k] = out
    if printed[down]:
        raise RuntimeError(f"the hook printed with the daemon down: {printed[down]!r}")
    if (
        "Session Mesh warning"
        not in printed["PreToolUse Write to a claimed file (warning printed)"]
    ):
        raise RuntimeError("the hook did not warn about the claimed file")
    for mode in MODES:
        s = median(wall[mode, "S"])
        s_cpu = median(cpu[mode, "S"])
        ctx.add("claude-hook", name="S: stdlib one-request script, whole process", value=s,
                unit="s", note="floor", pinning=mode)  # fmt: skip
        for k in runs:
            if k == "S":
                continue
            ctx.add("claude-hook", name=f"Claude Code hook: {k}", value=median(wall[mode, k]),
                    unit="s", floor="S", floor_value=s, limit=LIMIT, pinning=mode,
                    note=f"CPU {median(cpu[mode, k]) / s_cpu:.2f}x" if s_cpu else "",
                    spread=spread(wall[mode, k], wall[mode, "S"]))  # fmt: skip
