"""``python -m bench [--quick] [--json PATH] [--only SECTION …]``.

Starts its own echo floor and meshd in a temp folder under /tmp, runs the
sections in order, prints the table and writes the JSON file. Exit status 0
unless a benchmark crashed: ``--quick`` checks that each runs, never that it is
fast, and a full run reports shortfalls in the table, not in the exit status.

Latency rows are measured twice (BENCH.md): first the :data:`LATENCY` sections run
unpinned, as a user's processes run, against an echo floor and a daemon of their
own (so each pass sets up from scratch); then every section runs with client and
servers pinned to one CPU where it pins them. ``startup`` measures both ways itself,
interleaved in one run. ``--quick`` runs the unpinned pass for ``latency`` alone
(the pass's machinery; CI's minute has no room for more).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

from bench import (
    claims,
    claude_hook,
    common,
    fleet,
    fleet_ask,
    fleet_claims,
    hermes_hooks,
    shared_work,
    startup,
    targets,
    waiters,
)
from bench.common import ROOT, Place, raise_nofile
from bench.history import History
from bench.report import Report

SECTIONS = {
    **targets.SECTIONS,
    "claims": claims.run,
    "waiters": waiters.run,
    "shared": shared_work.run,
    "startup": startup.run,
    "claude-hook": claude_hook.run,
    "hermes": hermes_hooks.run,
    "fleet": fleet.run,
    "fleet-ask": fleet_ask.run,
    "fleet-claims": fleet_claims.run,
}
#: Sections whose rows are latencies measured on one CPU: they run unpinned too.
LATENCY = ("latency", "durable", "process", "scale", "claims", "shared", "fleet", "fleet-ask",
           "fleet-claims")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="tiny counts: a smoke test")
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "latest.json")
    ap.add_argument(
        "--only",
        nargs="+",
        choices=sorted(SECTIONS),
        metavar="SECTION",
        help=f"sections to run: {', '.join(SECTIONS)}",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (logs)")
    args = ap.parse_args(argv)
    raise_nofile(4096)
    report = Report()
    report.history = History(report.machine())
    failed: list[str] = []
    t0 = time.monotonic()
    load0 = os.getloadavg()
    wanted = [n for n in SECTIONS if not args.only or n in args.only]
    unpinned = [n for n in wanted if n in (("latency",) if args.quick else LATENCY)]
    print(f"bench: {report.history.runs} earlier full runs to check floors against", flush=True)
    if unpinned:
        common.MODE["latency"] = report.pinning = "unpinned"
        try:
            failed += _pass(args, report, unpinned, "unpinned")
        finally:
            common.MODE["latency"] = "pinned"
    failed += _pass(args, report, wanted, "pinned")
    m = report.machine()
    load1 = os.getloadavg()
    print()
    print(
        f"{m['date']} · commit {m['commit']} · {m['nproc']} CPU {m['cpu']} · "
        f"Python {m['python']} · {time.monotonic() - t0:.0f} s · load average "
        f"{load0[0]:.1f} at the start, {load1[0]:.1f} at the end"
    )
    print(report.table())
    report.to_json(args.json, args.quick)
    print(f"\nwrote {args.json}")
    if failed:
        print(f"crashed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _pass(args: argparse.Namespace, report: Report, names: list[str], how: str) -> list[str]:
    """The sections ``names`` against a fresh echo floor and daemon; those that crashed."""
    place = Place()
    failed: list[str] = []
    print(f"bench: {how} pass, temp folder {place.root}{' (quick)' if args.quick else ''}",
          flush=True)  # fmt: skip
    ctx = targets.setup(place, report, args.quick)
    ctx.pinning = how
    try:
        for name in names:
            report.pinning = how if name in LATENCY else ""
            print(f"[{name}]{' unpinned' if how == 'unpinned' else ''}", flush=True)
            t = time.monotonic()
            try:
                if name != "latency":
                    targets.keep_alive(ctx)
                SECTIONS[name](ctx)
            except Exception:
                traceback.print_exc()
                failed.append(f"{name} ({how})")
                report.note(f"section {name} crashed ({how})")
            print(f"  ({time.monotonic() - t:.1f} s)", flush=True)
    finally:
        report.pinning = ""
        ctx.meshd.stop()
        ctx.echo.stop()
        if not args.keep:
            place.cleanup()
    return failed


if __name__ == "__main__":
    sys.exit(main())
