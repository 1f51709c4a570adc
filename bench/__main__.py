"""``python -m bench [--quick] [--json PATH] [--only SECTION …]``.

Starts its own echo floor and meshd in a temp folder under /tmp, runs the
sections in order, prints the table and writes the JSON file. Exit status 0
unless a benchmark crashed: ``--quick`` checks that each runs, never that it is
fast, and a full run reports shortfalls in the table, not in the exit status.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

from bench import claims, fleet, fleet_ask, fleet_claims, shared_work, startup, targets, waiters
from bench.common import ROOT, Place, raise_nofile
from bench.report import Report

SECTIONS = {
    **targets.SECTIONS,
    "claims": claims.run,
    "waiters": waiters.run,
    "shared": shared_work.run,
    "startup": startup.run,
    "fleet": fleet.run,
    "fleet-ask": fleet_ask.run,
    "fleet-claims": fleet_claims.run,
}


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
    place = Place()
    failed: list[str] = []
    t0 = time.monotonic()
    print(f"bench: temp folder {place.root}{' (quick)' if args.quick else ''}", flush=True)
    ctx = targets.setup(place, report, args.quick)
    try:
        for name, fn in SECTIONS.items():
            if args.only and name not in args.only:
                continue
            print(f"[{name}]", flush=True)
            t = time.monotonic()
            try:
                fn(ctx)
            except Exception:
                traceback.print_exc()
                failed.append(name)
                report.note(f"section {name} crashed")
            print(f"  ({time.monotonic() - t:.1f} s)", flush=True)
    finally:
        ctx.meshd.stop()
        ctx.echo.stop()
        if not args.keep:
            place.cleanup()
    m = report.machine()
    print()
    print(
        f"{m['date']} · commit {m['commit']} · {m['nproc']} CPU {m['cpu']} · "
        f"Python {m['python']} · {time.monotonic() - t0:.0f} s"
    )
    print(report.table())
    report.to_json(args.json, args.quick)
    print(f"\nwrote {args.json}")
    if failed:
        print(f"crashed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
