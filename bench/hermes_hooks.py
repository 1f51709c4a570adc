"""``python -m bench.hermes_hooks [--n N]``: what the meshd plugin adds to each Hermes hook.

Inside the real hermes-agent 0.19.0 (``.venv-hermes``, or ``HERMES_VENV``), with the
plugin installed by ``meshctl hermes install`` into a temp ``HERMES_HOME`` and a
meshd of our own: each hook is fired through Hermes's own ``invoke_hook`` with the
kwargs Hermes passes, N times, interleaved with the same call with the plugin's
callbacks taken out (the floor: Hermes's dispatch alone); the two "per tool call" rows
fire the three hooks of one tool call in a row (BENCH.md's read ≤ 0.2 ms, write
≤ 0.3 ms). Then the daemon is stopped under the registered session and the same is
measured again in the same process, and once more in a new process that never reached
the daemon. One
``pre_llm_call`` row carries a pasted 1 MB message. The figure is the added time per call
(median and p99 of the per-call differences' distributions: plugin p50 - floor p50).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import ROOT, Place, start_meshd

INSIDE = r"""
import json, os, statistics, sys, time
import model_tools
from hermes_cli.plugins import get_plugin_manager, invoke_hook

N = int(sys.argv[1])
S = "20261130_150000_benchh"
manager = get_plugin_manager()
turn = dict(session_id=S, task_id="t", turn_id="u", conversation_history=[], model="fake-model",
            platform="cli", sender_id="")
write = dict(tool_name="write_file", args={"path": "/tmp/meshd-bench/x.py", "content": "1"},
             session_id=S, task_id="t", tool_call_id="c", turn_id="u", api_request_id="r")
read = dict(tool_name="read_file", result='{"content": "1|x"}', status="ok", duration_ms=1,
            session_id=S, task_id="t", tool_call_id="c", turn_id="u", api_request_id="r")
HOOKS = {
    "pre_llm_call": dict(user_message="benchmark the hooks", is_first_turn=False, **turn),
    "pre_llm_call (1 MB message)": dict(user_message="pasted log line\n" * 65536,
                                        is_first_turn=False, **turn),
    "pre_tool_call (terminal)": dict(tool_name="terminal", args={"command": "ls"},
                                     session_id=S, task_id="t", tool_call_id="c", turn_id="u"),
    "pre_tool_call (write_file)": write,
    "transform_tool_result": dict(result='{"ok": true}', **write),
    "post_tool_call (write_file)": dict(result='{"ok": true}', status="ok", duration_ms=1,
                                        **write),
    # a new file each call (board.touch noted, sent by the plugin's thread), then the same
    # file again and again (already recorded: nothing sent)
    "post_tool_call (read_file, first read)":
        lambda i: dict(read, args={"path": f"/tmp/meshd-bench/r{i}.py"}),
    "post_tool_call (read_file, read again)": dict(read, args={"path": "/tmp/meshd-bench/x.py"}),
    "post_llm_call": dict(user_message="x", assistant_response="y", **turn),
    "on_session_end": dict(session_id=S, task_id="t", turn_id="u", completed=True,
                           interrupted=False, model="fake-model", platform="cli"),
}
# One whole tool call as Hermes makes it: pre_tool_call, the tool (not timed),
# transform_tool_result, post_tool_call (BENCH.md's "per tool call" rows). A read names
# a new file each call (its first read: noted for the board); a write, the same file.
def tool_call(name, args):
    call = dict(tool_name=name, args=args, session_id=S, task_id="t", tool_call_id="c",
                turn_id="u", api_request_id="r")
    return [("pre_tool_call", call),
            ("transform_tool_result", dict(result='{"ok": true}', **call)),
            ("post_tool_call", dict(result='{"ok": true}', status="ok", duration_ms=1, **call))]
CALLS = {
    "per tool call: read_file": lambda i: tool_call("read_file",
                                                    {"path": f"/tmp/meshd-bench/c{i}.py"}),
    "per tool call: write_file": lambda i: tool_call("write_file",
                                                     {"path": "/tmp/meshd-bench/w.py",
                                                      "content": "1"}),
}

def name_of(label):
    return label.split(" ")[0]

def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]

invoke_hook("on_session_start", session_id=S, model="fake-model", platform="cli")
# The steady state: the plugin's pushed inbox view in sync (its listener subscribed and
# read the inbox once), as it is a moment after a session starts. A plugin without a
# view (an older one, measured beside) reads the inbox on every hook instead.
plugin = sys.modules.get("hermes_plugins.meshd._plugin")
rt = plugin._RUNTIMES.get("rt") if plugin is not None else None
view = getattr(rt, "view", None)
deadline = time.monotonic() + 10
while view is not None and time.monotonic() < deadline and not view.in_sync(rt.sessions[S]):
    time.sleep(0.01)

def measure():
    out = {}
    for label, kwargs in HOOKS.items():
        out[label] = one(label, kwargs)
    for label, steps in CALLS.items():
        out[label] = whole(steps)
    return out

def whole(steps):
    names = [hook for hook, _ in steps(0)]
    callbacks = {hook: list(manager._hooks.get(hook, [])) for hook in names}
    with_plugin, floor = [], []
    for i in range(N):
        calls = steps(i)
        for hooked, times in ((True, with_plugin), (False, floor)):
            for hook in names:
                manager._hooks[hook] = callbacks[hook] if hooked else []
            t = time.perf_counter_ns()
            for hook, kw in calls:
                invoke_hook(hook, **kw)
            times.append(time.perf_counter_ns() - t)
    for hook in names:
        manager._hooks[hook] = callbacks[hook]
    return {"p50": statistics.median(with_plugin) - statistics.median(floor),
            "p99": pct(with_plugin, 0.99) - pct(floor, 0.99),
            "floor_p50": statistics.median(floor)}

def one(label, kwargs):
    hook = name_of(label)
    callbacks = list(manager._hooks.get(hook, []))
    with_plugin, floor = [], []
    for i in range(N):
        kw = kwargs(i) if callable(kwargs) else kwargs
        for hooked, times in ((callbacks, with_plugin), ([], floor)):
            manager._hooks[hook] = hooked
            t = time.perf_counter_ns()
            invoke_hook(hook, **kw)
            times.append(time.perf_counter_ns() - t)
    manager._hooks[hook] = callbacks
    return {"p50": statistics.median(with_plugin) - statistics.median(floor),
            "p99": pct(with_plugin, 0.99) - pct(floor, 0.99),
            "floor_p50": statistics.median(floor)}

def measured():
    out = measure()
    out["_fallbacks"] = getattr(view, "fallbacks", None)  # inbox reads the hooks made
    return out

print(json.dumps(measured()), flush=True)
if sys.stdin.readline().strip() == "stopped":  # the same registered session, daemon gone
    print(json.dumps(measured()), flush=True)
"""


Figures = dict[str, dict[str, float]]


def _inside(
    hermes: Path, env: dict[str, str], n: int, then: Callable[[], None] | None = None
) -> list[Figures]:
    """Run INSIDE; with ``then``, call it after the first round (it stops the daemon)
    and measure again in the same process, its session still registered."""
    proc = subprocess.Popen(
        [str(hermes / "python"), "-c", textwrap.dedent(INSIDE), str(n)], env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdin is not None
    assert proc.stdout is not None
    rounds = [json.loads(proc.stdout.readline() or "null")]
    if then is not None and rounds[0] is not None:
        then()
        proc.stdin.write("stopped\n")
        proc.stdin.flush()
        rounds.append(json.loads(proc.stdout.readline() or "null"))
    _, err = proc.communicate(timeout=600)
    if proc.returncode != 0 or None in rounds:
        raise RuntimeError(err[-3000:])
    return rounds


def hermes_venv() -> Path:
    return Path(os.environ.get("HERMES_VENV") or ROOT / ".venv-hermes")


def measure(place: Place, n: int) -> tuple[Figures, Figures, Figures]:
    """(daemon up, daemon stopped under a registered session, daemon down from the
    start), each hook and tool call ``n`` times, with a meshd of its own in ``place``."""
    meshd, _socket = start_meshd(place, "hermes")
    env = place.env("hermes")
    root = place.root / "hermes-plugin"
    env.update(HERMES_HOME=str(root / "hh"), HOME=str(root / "home"))
    for d in ("hh", "home"):
        (root / d).mkdir(parents=True)
    try:
        subprocess.run(
            [sys.executable, "-m", "meshctl.cli", "hermes", "install"], env=env, check=True,
            capture_output=True,
        )  # fmt: skip
        bin_ = hermes_venv() / "bin"
        up, gone = _inside(bin_, env, n, then=meshd.stop)
        [down] = _inside(bin_, env, n)
    finally:
        meshd.stop()
    return up, gone, down


#: BENCH.md's "Hermes plugin, per tool call in process": p50 with the daemon up / down.
TARGETS = {"read_file": (200e-6, 20e-6), "write_file": (300e-6, 20e-6)}


def run(ctx: Any) -> None:
    """``python -m bench``'s section: the per-tool-call rows against their targets."""
    if not (hermes_venv() / "bin" / "hermes").exists():
        for tool in TARGETS:
            ctx.add("hermes", name=f"Hermes plugin per tool call: {tool}", value=None,
                    unit="s", skip=f"no hermes-agent in {hermes_venv()}", pinning="-")  # fmt: skip
        return
    n = 200 if ctx.quick else 2000
    up, _gone, down = measure(ctx.place, n)
    for tool, (up_limit, down_limit) in TARGETS.items():
        for how, figures, limit in (("daemon up", up, up_limit), ("daemon down", down, down_limit)):
            row = figures[f"per tool call: {tool}"]
            ctx.add("hermes", name=f"Hermes plugin per tool call: {tool}, {how}",
                    value=row["p50"] / 1e9, unit="s", limit=limit, absolute=True, pinning="-",
                    note=f"added to Hermes's dispatch ({row['floor_p50'] / 1e3:.1f} µs); "
                    f"{n} calls, in process")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.hermes_hooks", description=__doc__)
    ap.add_argument("--n", type=int, default=2000, help="calls per hook and state")
    args = ap.parse_args(argv)
    if not (hermes_venv() / "bin" / "hermes").exists():
        print(f"no hermes-agent in {hermes_venv()}: run scripts/test.sh first", file=sys.stderr)
        return 1
    place = Place()
    try:
        up, gone, down = measure(place, args.n)
    finally:
        place.cleanup()
    print(
        f"added time per hook call, {args.n} calls each (µs): daemon up | daemon stopped "
        "under a registered session | daemon down from the start"
    )
    print(
        f"{'hook':40} {'p50':>8} {'p99':>8} | {'p50':>7} {'p99':>7} | {'p50':>7} {'p99':>7}"
        "   floor p50"
    )
    reads = [r.pop("_fallbacks", None) for r in (up, gone, down)]
    for label in up:
        u, g, d = up[label], gone[label], down[label]
        print(
            f"{label:40} {u['p50'] / 1e3:8.1f} {u['p99'] / 1e3:8.1f} | "
            f"{g['p50'] / 1e3:7.1f} {g['p99'] / 1e3:7.1f} | "
            f"{d['p50'] / 1e3:7.1f} {d['p99'] / 1e3:7.1f}   {u['floor_p50'] / 1e3:.1f}"
        )
    print("inbox reads on the hooks' path so far, per process (the view not in sync; "
          "None: no view): " + " | ".join(str(r) for r in reads))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
