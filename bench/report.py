"""Rows, the table and the JSON file.

A row is one figure. When it has a floor, its ratio to the floor is what the
target is about (``max``: ratio must not exceed the limit; ``min``: must reach
it). Rows marked *absolute* compare the figure itself with a limit. Rows without
either are context (the floors themselves, breakdowns) and say ``info``.

A latency row says how it was measured (``pinning``: "unpinned", as a user runs
it, or "pinned", client and servers on one CPU); its ``spread`` is the lowest and
highest ratio over the run's interleaved rounds when the section keeps them. A row
whose floor landed far from that floor's own history (the same row of earlier
full runs on a machine like this one: :mod:`bench.history`) says so and does not
pass on it (``FLOOR?``): a floor that moved 6x measures the machine, not us.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from bench.common import ROOT


@dataclass
class Row:
    name: str
    value: float | None
    unit: str
    floor: str = ""
    floor_value: float | None = None
    limit: float | None = None
    kind: Literal["max", "min"] = "max"
    absolute: bool = False
    note: str = ""
    skip: str = ""
    group: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    pinning: str = ""
    #: lowest and highest ratio over the interleaved rounds (None: not kept)
    spread: tuple[float, float] | None = None
    #: why the floor is not trusted (it moved far from its history), or ""
    floor_moved: str = ""

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.floor_value or self.absolute:
            return None
        return self.value / self.floor_value

    @property
    def verdict(self) -> str:
        if self.skip:
            return "skip"
        if self.limit is None:
            return "info"
        x = self.value if self.absolute else self.ratio
        if x is None or math.isnan(x):
            return "n/a"
        ok = x <= self.limit if self.kind == "max" else x >= self.limit
        if self.floor_moved:
            return "FLOOR?"  # neither pass nor short: the floor is not what it was
        return "pass" if ok else "SHORT"

    @property
    def target(self) -> str:
        if self.limit is None:
            return ""
        op = "≤" if self.kind == "max" else "≥"
        if self.absolute:
            return f"{op} {fmt(self.limit, self.unit)}"
        return f"{op} {self.limit:g}x {self.floor.split(' ')[0]}"


def fmt(v: float | None, unit: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if unit == "s":
        if v < 1e-3:
            return f"{v * 1e6:.1f} µs"
        if v < 1:
            return f"{v * 1e3:.2f} ms"
        return f"{v:.2f} s"
    if unit == "req/s":
        return f"{v / 1e3:.1f}k/s" if v >= 1e3 else f"{v:.0f}/s"
    if unit == "B":
        if v >= 1 << 20:
            return f"{v / (1 << 20):.1f} MiB"
        if v >= 1024:
            return f"{v / 1024:.2f} KB"
        return f"{v:.0f} B"
    if unit == "%":
        return f"{v:.2f} %"
    return f"{v:g} {unit}".strip()


class Report:
    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.notes: list[str] = []
        self.started = time.time()
        #: stamped on the rows added while it is set (the section runner sets it)
        self.pinning = ""
        self.history: Any = None

    def add(self, row: Row) -> Row:
        if not row.pinning:
            row.pinning = self.pinning
        if self.history is not None:
            row.floor_moved = self.history.check(row)
        self.rows.append(row)
        how = f" [{row.pinning}]" if row.pinning else ""
        print(f"  {row.name + how:<62} {fmt(row.value, row.unit):>12}  {row.verdict}", flush=True)
        if row.floor_moved:
            print(f"    {row.floor_moved}", flush=True)
        return row

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"  note: {text}", flush=True)

    def ordered(self) -> list[Row]:
        """The rows in the order first seen, a row's unpinned figure before its pinned one."""
        first: dict[str, int] = {}
        for i, r in enumerate(self.rows):
            first.setdefault(r.name, i)
        rank = {"unpinned": 0, "pinned": 1}
        return sorted(self.rows, key=lambda r: (first[r.name], rank.get(r.pinning, 2)))

    def table(self) -> str:
        head = ("benchmark", "pinning", "figure", "floor", "ratio (rounds)", "target", "result")
        lines = [
            "| " + " | ".join(head) + " |",
            "|" + "|".join("---" for _ in head) + "|",
        ]
        for r in self.ordered():
            floor = f"{r.floor} {fmt(r.floor_value, r.unit)}" if r.floor else ""
            ratio = f"{r.ratio:.2f}x" if r.ratio is not None else ""
            if ratio and r.spread:
                ratio += f" ({r.spread[0]:.2f}-{r.spread[1]:.2f})"
            verdict = f"skip: {r.skip}" if r.skip else r.verdict
            if r.floor_moved:
                verdict += f": {r.floor_moved}"
            name = r.name + (f" ({r.note})" if r.note else "")
            cells = (name, r.pinning, fmt(r.value, r.unit), floor, ratio, r.target, verdict)
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def machine(self) -> dict[str, Any]:
        model = ""
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        try:
            commit = subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
        except OSError:
            commit = ""
        return {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.started)),
            "commit": commit,
            "nproc": os.cpu_count(),
            "cpu": model,
            "python": platform.python_version(),
            "kernel": platform.release(),
        }

    def to_json(self, path: Path, quick: bool) -> None:
        rows = []
        for r in self.ordered():
            d = asdict(r)
            d.update(ratio=r.ratio, verdict=r.verdict, target=r.target)
            rows.append(d)
        doc = {
            "machine": self.machine(),
            "load": list(os.getloadavg()),
            "quick": quick,
            "rows": rows,
            "notes": self.notes,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_clean(doc), indent=1) + "\n")


def _clean(o: Any) -> Any:
    """NaN is not JSON: write null."""
    if isinstance(o, float) and math.isnan(o):
        return None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_clean(v) for v in o]
    return o


def spread(values: list[float], floors: list[float]) -> tuple[float, float] | None:
    """Lowest and highest ratio of round-by-round pairs (a figure and the floor measured
    beside it in the same round); None when there are fewer than two rounds."""
    ratios = [v / f for v, f in zip(values, floors, strict=False) if f]
    return (min(ratios), max(ratios)) if len(ratios) >= 2 else None
