"""Rows, the table and the JSON file.

A row is one figure. When it has a floor, its ratio to the floor is what the
target is about (``max``: ratio must not exceed the limit; ``min``: must reach
it). Rows marked *absolute* compare the figure itself with a limit. Rows without
either are context (the floors themselves, breakdowns) and say ``info``.
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

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        print(f"  {row.name:<52} {fmt(row.value, row.unit):>12}  {row.verdict}", flush=True)
        return row

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"  note: {text}", flush=True)

    def table(self) -> str:
        head = ("benchmark", "figure", "floor", "ratio", "target", "result")
        lines = [
            "| " + " | ".join(head) + " |",
            "|" + "|".join("---" for _ in head) + "|",
        ]
        for r in self.rows:
            floor = f"{r.floor} {fmt(r.floor_value, r.unit)}" if r.floor else ""
            ratio = f"{r.ratio:.2f}x" if r.ratio is not None else ""
            verdict = f"skip: {r.skip}" if r.skip else r.verdict
            name = r.name + (f" ({r.note})" if r.note else "")
            cells = (name, fmt(r.value, r.unit), floor, ratio, r.target, verdict)
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
        for r in self.rows:
            d = asdict(r)
            d.update(ratio=r.ratio, verdict=r.verdict, target=r.target)
            rows.append(d)
        doc = {"machine": self.machine(), "quick": quick, "rows": rows, "notes": self.notes}
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
