"""Each floor against its own history: a floor that moved far is flagged, never passed on.

A ratio is only as good as its floor. On a shared machine a floor can land far from
its usual value (an idle daemon's ping p99 at 6.8x its usual figure made a storm row
read "met"), and the ratio then measures the machine. So every row with a target
looks up the floor it was divided by in the earlier full runs of this machine kind
(same CPU model and count): the JSON files of ``docs/bench-runs/`` (the recorded
runs) and ``bench/results/`` (your own). When the floor is more than :data:`FACTOR`
times above or below the median of that history, the row says so and its verdict is
``FLOOR?`` instead of pass or short. Fewer than two earlier figures: no judgement.

Rows are matched by name and pinning (runs from before rows were printed both ways
were pinned).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import ROOT

if TYPE_CHECKING:
    from bench.report import Row

#: How far a floor may move from its history's median (either way) and still be used.
FACTOR = 2.5
PLACES = (ROOT / "docs" / "bench-runs", ROOT / "bench" / "results")


class History:
    def __init__(self, machine: dict[str, object], places: tuple[Path, ...] = PLACES) -> None:
        self.floors: dict[tuple[str, str], list[float]] = {}
        self.runs = 0
        for place in places:
            for path in sorted(place.glob("*.json")) if place.is_dir() else ():
                try:
                    doc = json.loads(path.read_text())
                except (OSError, ValueError):
                    continue
                if not isinstance(doc, dict) or doc.get("quick", True):
                    continue
                m = doc.get("machine", {})
                if (m.get("cpu"), m.get("nproc")) != (machine.get("cpu"), machine.get("nproc")):
                    continue
                self.runs += 1
                for r in doc.get("rows", []):
                    if r.get("limit") is not None and r.get("floor_value"):
                        key = (r["name"], r.get("pinning") or "pinned")
                        self.floors.setdefault(key, []).append(float(r["floor_value"]))

    def check(self, row: Row) -> str:
        """Why ``row``'s floor is not trusted, or "" (no target, no floor, no history)."""
        if row.limit is None or row.absolute or not row.floor_value or row.skip:
            return ""
        past = self.floors.get((row.name, row.pinning or "pinned"), [])
        if len(past) < 2:
            return ""
        usual = statistics.median(past)
        moved = row.floor_value / usual
        if 1 / FACTOR <= moved <= FACTOR:
            return ""
        from bench.report import fmt

        return (
            f"floor {fmt(row.floor_value, row.unit)} is {moved:.2f}x its median "
            f"{fmt(usual, row.unit)} over {len(past)} earlier runs"
        )
