"""``python -m bench.compare BEFORE.json AFTER.json``: the target rows of two runs side by side.

Each run's rows are ratios to floors measured in that run (BENCH.md), so the two
columns compare like with like even when the machine's load differs between runs.
A row renamed since the BEFORE run is matched through :data:`RENAMED`; a row only
in one run says so. Rows are matched by name and pinning (a run from before rows were
printed both ways was pinned). Prints a Markdown table: row, pinning, target, before,
after, met.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.report import fmt

RENAMED = {  # name in an older run -> name now (labels say what they measure)
    "heartbeat via Mesh p50": "heartbeat round trip via Mesh.call p50",
    "heartbeat via Mesh p99": "heartbeat round trip via Mesh.call p99",
    "session.list, 10 sessions, via Mesh p50": "session.list of 10 sessions via Mesh.call p50",
    "meshctl --json sessions active": "meshctl sessions active",  # now the startup section's
    "durable writes/s, 100 writer(s)": "durable writes/s, 100 connection(s) registering + ending",
    "durable writes/s at 100 vs own heartbeat rate": (
        "durable writes/s at 100 connections vs heartbeats/s at 100"
    ),
    "memory per session (RSS delta over 10,000)": (
        "daemon RSS growth per session, 10,000 registered"
    ),
    "full GC pause, 10,000 sessions (in-process Registry)": (
        "full GC pause, 10,000 sessions, nothing frozen"
    ),
    "full GC pause, gc.freeze() after start-up (proposed fix)": (
        "full GC pause, 10,000 sessions registered after gc.freeze() (as meshd runs)"
    ),
    "claim.check, 10,000 live claims in deep trees": (
        "claim.check of a free path beside 10,000 live claims"
    ),
    "claim.check, 10,000 vs 100 claims": "claim.check of a free path: 10,000 live claims vs 100",
    "claim + release round trip p50 (durable)": "claim or release round trip p50 (each durable)",
    "fleet claim + release p50 (vs NATS request/reply)": "fleet claim + release p50",
    "query.ask / E3": "query.ask answered by a live responder p50",
    "durable write round trip p50, 1 connection, same CPU": (
        "durable write round trip p50, 1 connection"
    ),
    "claim + release with 100,000 finished claims in history": (
        "claim or release round trip p50, 100,000 finished claims in history"
    ),
    "100 clients, 95 % heartbeats, 5 % claim + release: throughput": (
        "100 clients (95 heartbeating, 5 claiming + releasing): requests/s"
    ),
    "100 clients, 95/5 mix: p99": "100 clients (95 heartbeating, 5 claiming + releasing): p99",
    "a waiter granted after a release": "queued waiter granted, from sending the release",
    "claim + release with ranks in play": "claim or release round trip p50, ranks in play",
    "ask answered by a live responder": "query.ask answered by a live responder p50",
    "10,000 waiters on one key: enqueue (10x the waiters)": (
        "10,000 waiters on one key: enqueue, wall (10x the waiters)"
    ),
    "10,000 waiters on one key: cancel (10x the waiters)": (
        "10,000 waiters on one key: cancel, wall (10x the waiters)"
    ),
    "10,000 waiters on one key: enqueue cpu (10x the waiters)": (
        "10,000 waiters on one key: enqueue, daemon CPU (10x the waiters)"
    ),
    "10,000 waiters on one key: cancel cpu (10x the waiters)": (
        "10,000 waiters on one key: cancel, daemon CPU (10x the waiters)"
    ),
}


def load(path: Path) -> tuple[dict[str, Any], dict[tuple[str, str], dict[str, Any]]]:
    doc = json.loads(path.read_text())
    rows = {(RENAMED.get(r["name"], r["name"]), r.get("pinning") or "pinned"): r
            for r in doc["rows"]}  # fmt: skip
    return doc["machine"], rows


def shown(r: dict[str, Any] | None) -> str:
    """The figure the target is about: the ratio, or the figure of an absolute row."""
    if r is None:
        return "(not in this run)"
    if r.get("skip"):
        return f"skipped: {r['skip']}"
    if r["absolute"]:
        x = fmt(r["value"], r["unit"])
    else:
        x = "—" if r["ratio"] is None else f"{r['ratio']:.2f}x"
    return f"{x} ✗" if r["verdict"] == "SHORT" else x


def table(before: Path, after: Path) -> str:
    mb, b = load(before)
    ma, a = load(after)
    head = ("row", "pinning", "target", f"before ({mb['commit']})", f"after ({ma['commit']})",
            "met")  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    names = [n for n, r in a.items() if r.get("limit") is not None]
    names += [n for n, r in b.items() if r.get("limit") is not None and n not in a]
    for key in names:
        rb, ra = b.get(key), a.get(key)
        target = (ra or rb or {}).get("target", "")
        verdict = ra["verdict"] if ra else "—"
        met = {"pass": "met", "SHORT": "not met"}.get(verdict, verdict)
        lines.append(f"| {key[0]} | {key[1]} | {target} | {shown(rb)} | {shown(ra)} | {met} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(Path(sys.argv[1]), Path(sys.argv[2])))
