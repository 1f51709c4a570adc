"""``meshctl import session-coord``: a session-coord board read, its manifest as [jobs].

The board is a SQLite file in session-coord's format (the tables and columns
this command reads: ``sessions``, ``claims``, ``cron_events``); the manifest is
session-coord's example shape, ``_doc`` comment included.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import Meshctl

from meshd.config import load

MANIFEST = {
    "_doc": ["Cron resource manifest for session-coord."],
    "nightly-backup": {
        "resources": ["file:~/projects", "cron-store"],
        "name": "Nightly projects backup",
        "policy": "wait",
        "critical": True,
    },
    "fleet watchdog!": {"resources": ["gpu-fleet"], "name": "GPU watchdog", "policy": "skip"},
    "empty": {"resources": []},
}


def make_board(path: Path) -> None:
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE sessions(id TEXT PRIMARY KEY, task TEXT, surface TEXT, started_at REAL,
                              last_seen REAL, status TEXT DEFAULT 'active');
        CREATE TABLE claims(id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT, resource TEXT,
                            mode TEXT DEFAULT 'exclusive', task TEXT, claimed_at REAL,
                            ttl_min REAL, released_at REAL, status TEXT DEFAULT 'held');
        CREATE TABLE cron_events(id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT,
                                 job_name TEXT, event TEXT, session_id TEXT, reason TEXT,
                                 created_at REAL);
        INSERT INTO sessions VALUES ('b9162bfad011', 'refactor lib', 'desktop', 1, 2, 'active');
        INSERT INTO claims (session_id, resource, task, claimed_at, status)
            VALUES ('b9162bfad011', 'file:/srv/lib', 'refactor lib', 1, 'held');
        INSERT INTO claims (session_id, resource, task, claimed_at, released_at, status)
            VALUES ('b9162bfad011', 'file:/srv/old', 'old', 1, 2, 'released');
        INSERT INTO cron_events (job_id, job_name, event, created_at)
            VALUES ('nightly-backup', 'Nightly projects backup', 'skipped', 5);
        """
    )
    con.commit()
    con.close()


@pytest.fixture
def coord(short_tmp: Path, mesh_env: Any) -> dict[str, Any]:
    board = short_tmp / "board.db"
    make_board(board)
    manifest = short_tmp / "cron_resources.json"
    manifest.write_text(json.dumps(MANIFEST))
    return {"board": board, "manifest": manifest, "env": dict(mesh_env.env), "cfg": mesh_env.config}


class TestImport:
    def test_shows_board_and_jobs_without_writing(
        self, meshctl: Meshctl, coord: dict[str, Any]
    ) -> None:
        """Without --apply: the board's held claims and the [jobs] tables; nothing written."""
        before = coord["board"].read_bytes()

        r = meshctl(
            "import", "session-coord", str(coord["board"]), "--manifest",
            str(coord["manifest"]), "--json", env=coord["env"],
        )  # fmt: skip

        assert r.code == 0, r
        doc = r.json()
        assert [c["resource"] for c in doc["board"]["claims"]] == ["file:/srv/lib"]
        jobs = {j["source_id"]: j for j in doc["jobs"]}
        assert set(jobs) == {"nightly-backup", "fleet watchdog!"}
        assert jobs["nightly-backup"]["resources"] == ["file:~/projects", "res:cron-store"]
        assert jobs["nightly-backup"]["critical"] is True
        assert jobs["fleet watchdog!"]["name"] == "fleet-watchdog"
        assert jobs["fleet watchdog!"]["policy"] == "skip"
        assert "[jobs.nightly-backup]" in doc["toml"]
        assert doc["applied"] is None
        assert not coord["cfg"].exists()
        assert coord["board"].read_bytes() == before

    def test_apply_appends_tables_that_load(self, meshctl: Meshctl, coord: dict[str, Any]) -> None:
        """--apply keeps the existing config, adds the jobs once, and the daemon's loader accepts it."""
        coord["cfg"].write_text("[defaults]\nstale_after = 15\n")
        args = [
            "import",
            "session-coord",
            str(coord["board"]),
            "--manifest",
            str(coord["manifest"]),
        ]

        first = meshctl(*args, "--apply", "--json", env=coord["env"])
        again = meshctl(*args, "--apply", "--json", env=coord["env"])

        assert first.code == 0, first
        assert sorted(first.json()["applied"]) == ["fleet-watchdog", "nightly-backup"]
        assert again.code == 0, again
        assert again.json()["applied"] == []
        assert sorted(again.json()["skipped"]) == ["fleet-watchdog", "nightly-backup"]
        text = coord["cfg"].read_text()
        assert text.startswith("[defaults]\nstale_after = 15\n")
        assert text.count("[jobs.nightly-backup]") == 1
        settings = load(coord["cfg"], "default")
        assert settings.stale_after == 15
        specs = {j.name: j for j in settings.jobs}
        assert specs["nightly-backup"].policy == "wait"
        assert specs["nightly-backup"].critical is True
        assert "res:cron-store" in specs["nightly-backup"].resources
        assert specs["fleet-watchdog"].resources == ("res:gpu-fleet",)

    def test_broken_manifest_is_an_error(self, meshctl: Meshctl, coord: dict[str, Any]) -> None:
        coord["manifest"].write_text("{not json")

        r = meshctl(
            "import", "session-coord", str(coord["board"]), "--manifest",
            str(coord["manifest"]), "--apply", env=coord["env"],
        )  # fmt: skip

        assert r.code == 1, r
        assert "not valid JSON" in r.err
        assert not coord["cfg"].exists()
