"""Read a session-coord board (read-only) and turn its cron manifest into ``[jobs]`` tables.

session-coord (a daemon-less CLI over SQLite) keeps its board in
``~/.hermes/state/session_coordination.db`` (``HERMES_COORD_DB``) and what each
cron job touches in a JSON manifest, ``~/.hermes/state/cron_resources.json``
(``HERMES_COORD_CRON_MANIFEST``)::

    {"nightly-backup": {"resources": ["file:~/projects"], "name": "…",
                        "policy": "wait", "critical": true}}

Each manifest entry becomes a ``[jobs.NAME]`` table (SPEC §7) with the same
resources, policy and criticality; keys of kinds we do not have (``gpu-fleet``,
``cron-store``) become ``res:`` keys, and names are cut to our job-name
alphabet. The board itself is only read, never written (``mode=ro``): what it
shows (live sessions, held claims, the last guard decisions per job) is for the
person switching over. Nothing here needs the daemon.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from meshctl._core import env as _env

OUR_KINDS = ("file:", "repo:", "branch:", "port:", "cron:", "gateway:", "account:", "box:")
OUR_KINDS2 = ("skill:", "res:")
BARE = ("memory", "ui:desktop")
DEFAULT_WAIT = 900.0  # session-coord's cron guard waits 900 s by default
_NAME_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def default_db() -> Path:
    return Path(
        os.path.expanduser(_env.get("HERMES_COORD_DB", "~/.hermes/state/session_coordination.db"))
    )


def default_manifest() -> Path:
    return Path(
        os.path.expanduser(
            _env.get("HERMES_COORD_CRON_MANIFEST", "~/.hermes/state/cron_resources.json")
        )
    )


@dataclass
class Job:
    """One manifest entry, translated."""

    name: str
    source_id: str
    title: str
    resources: list[str]
    policy: str
    critical: bool
    notes: list[str] = field(default_factory=list)

    def toml(self) -> str:
        res = ", ".join(json.dumps(r) for r in self.resources)
        lines = [
            f"# from session-coord job {json.dumps(self.source_id)}: {self.title}",
            *[f"# {n}" for n in self.notes],
            f"[jobs.{self.name}]",
            f"resources = [{res}]",
            f'policy = "{self.policy}"',
        ]
        if self.policy == "wait":
            lines.append(f"timeout = {DEFAULT_WAIT:g}")
        lines.append(f"critical = {'true' if self.critical else 'false'}")
        return "\n".join(lines) + "\n"


def translate_key(raw: str) -> tuple[str, str | None]:
    """A session-coord resource key as ours, and a note when it had to change."""
    key = raw.strip()
    if key in BARE or key.startswith(OUR_KINDS + OUR_KINDS2):
        return key, None
    if key.startswith(("~", "/")):
        return f"file:{key}", None
    value = re.sub(r"\s+", "-", key.split(":", 1)[-1] if ":" in key else key) or "unnamed"
    return f"res:{value}", f"{raw!r} has no kind of ours: claimed as res:{value}"


def job_name(job_id: str, taken: set[str]) -> str:
    base = _NAME_BAD.sub("-", job_id).strip("-")[:64] or "job"
    name, n = base, 2
    while name in taken:
        suffix = f"-{n}"
        name, n = base[: 64 - len(suffix)] + suffix, n + 1
    taken.add(name)
    return name


def read_manifest(path: Path) -> list[Job]:
    """The manifest's jobs, translated; an unreadable manifest is an error (said plainly)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ImportError_(f"cannot read the cron manifest {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise ImportError_(f"the cron manifest {path} is not valid JSON: {exc}") from exc
    entries = raw.get("jobs", raw) if isinstance(raw, dict) else {}
    jobs: list[Job] = []
    taken: set[str] = set()
    for job_id, spec in (entries or {}).items():
        if str(job_id).startswith("_") or not isinstance(spec, dict):
            continue  # "_doc" and other comments
        resources = spec.get("resources") or []
        if not resources:
            continue  # session-coord ignores entries without resources too
        keys, notes = [], []
        for r in resources:
            key, note = translate_key(str(r))
            keys.append(key)
            if note:
                notes.append(note)
        policy = str(spec.get("policy")) if spec.get("policy") in ("wait", "skip") else "skip"
        jobs.append(
            Job(
                name=job_name(str(job_id), taken),
                source_id=str(job_id),
                title=str(spec.get("name") or job_id),
                resources=keys,
                policy=policy,
                critical=bool(spec.get("critical", False)),
                notes=notes,
            )
        )
    return jobs


class ImportError_(Exception):
    """The board or manifest cannot be read; the message says which and why."""


def read_board(path: Path) -> dict[str, Any]:
    """Live sessions, held claims and the last guard decision per job, read-only."""
    if not path.exists():
        return {"db": str(path), "found": False}
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error as exc:
        raise ImportError_(f"cannot open the session-coord board {path}: {exc}") from exc
    con.row_factory = sqlite3.Row
    try:
        sessions = _rows(
            con, "SELECT id, task, surface, last_seen FROM sessions WHERE status = 'active'"
        )
        claims = _rows(
            con,
            "SELECT session_id, resource, mode, task, claimed_at FROM claims "
            "WHERE status = 'held' AND released_at IS NULL",
        )
        cron = _rows(
            con,
            "SELECT job_id, job_name, event, MAX(created_at) AS at FROM cron_events "
            "GROUP BY job_id",
        )
    finally:
        con.close()
    return {"db": str(path), "found": True, "sessions": sessions, "claims": claims, "cron": cron}


def _rows(con: sqlite3.Connection, sql: str) -> list[dict[str, Any]]:
    try:
        return [dict(r) for r in con.execute(sql)]
    except sqlite3.Error:
        return []  # an older board without that table or column


def apply(config: Path, jobs: list[Job]) -> tuple[list[str], list[str]]:
    """Append the tables of ``jobs`` not yet declared to ``config``; (added, skipped).

    The new file is validated with the daemon's own loader before it replaces the
    old one, so a bad translation never leaves a config the daemon would refuse.
    """
    from meshd.config import ConfigError, load

    text = config.read_text(encoding="utf-8") if config.exists() else ""
    declared = set(re.findall(r"^\s*\[jobs\.([A-Za-z0-9_.-]+)\]", text, re.MULTILINE))
    added = [j for j in jobs if j.name not in declared]
    skipped = [j.name for j in jobs if j.name in declared]
    if not added:
        return [], skipped
    block = "\n".join(j.toml() for j in added)
    new = (text.rstrip("\n") + "\n\n" if text.strip() else "") + block
    config.parent.mkdir(parents=True, exist_ok=True)
    tmp = config.with_name(config.name + ".import.tmp")
    tmp.write_text(new, encoding="utf-8")
    try:
        load(tmp, "default")
    except ConfigError as exc:
        tmp.unlink()
        raise ImportError_(f"the translated jobs would not load, nothing written: {exc}") from exc
    os.replace(tmp, config)
    return [j.name for j in added], skipped
