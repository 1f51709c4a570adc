"""``meshctl daemon logs [-f]``: the log of a daemon meshctl started (the state folder's
file here: no systemd unit runs it)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from tests.cli.conftest import Meshctl


def test_logs_prints_and_follows_the_state_folders_log(meshctl: Meshctl, offline_env: Any) -> None:
    env = offline_env.env
    none = meshctl("daemon", "logs", env=env)
    assert meshctl("daemon", "start", env=env).code == 0
    try:
        shown = meshctl("daemon", "logs", "-n", "5", env=env)
        follow = subprocess.Popen([sys.executable, "-m", "meshctl.cli", "daemon", "logs", "-f",
                                   "-n", "1"], env=env, stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert meshctl("daemon", "reload", env=env).code == 0
            assert follow.stdout is not None
            seen = []
            while not any("config reloaded from" in line for line in seen):
                line = follow.stdout.readline()  # -f prints the reload's line as it is logged
                assert line, seen
                seen.append(line)
        finally:
            follow.terminate()
            follow.communicate(timeout=10)
    finally:
        meshctl("daemon", "stop", env=env)

    assert none.code == 1, none
    assert "no log for profile default:" in none.err
    assert shown.code == 0, shown
    assert 0 < len(shown.out.splitlines()) <= 5


def test_logs_json_is_one_document_and_follow_one_object_a_line(
    meshctl: Meshctl, offline_env: Any
) -> None:
    """SPEC §9: ``--json`` on every command prints exactly one JSON document. ``daemon
    logs --json`` printed the log's raw lines (fails before): now ``{"profile",
    "source", "path", "unit", "lines"}``, and with ``-f`` one ``{"line"}`` object a line
    as each is logged, as ``inbox --follow --json`` does."""
    import json

    env = offline_env.env
    assert meshctl("daemon", "start", env=env).code == 0
    try:
        shown = meshctl("--json", "daemon", "logs", "-n", "5", env=env)
        follow = subprocess.Popen([sys.executable, "-m", "meshctl.cli", "--json", "daemon", "logs",
                                   "-f", "-n", "1"], env=env, stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert meshctl("daemon", "reload", env=env).code == 0
            assert follow.stdout is not None
            seen: list[dict[str, str]] = []
            while not any("config reloaded from" in d["line"] for d in seen):
                line = follow.stdout.readline()
                assert line, seen
                seen.append(json.loads(line))
        finally:
            follow.terminate()
            follow.communicate(timeout=10)
    finally:
        meshctl("daemon", "stop", env=env)

    assert shown.code == 0, shown
    document = shown.json()
    assert document["profile"] == "default", document
    assert document["source"] == "file", document
    assert document["path"] == str(offline_env.state_dir / "default.log"), document
    assert 0 < len(document["lines"]) <= 5, document
    assert all(isinstance(line, str) for line in document["lines"]), document
    assert all(set(d) == {"line"} for d in seen), seen
