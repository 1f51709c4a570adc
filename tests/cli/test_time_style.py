"""One time style, one ordering and one ``--since`` across the CLI.

People read relative times (``3m ago``) in listings and the local time plus the
relative one in detail views; ``--json`` carries RFC 3339 UTC; listings run
oldest first; every history listing takes the same ``--since``.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import click
import pytest

from meshctl.cli import _time

from .conftest import Meshctl, Run

Daemon = Any

RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
RAW_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")
EPOCH = re.compile(r"\b1[5-9]\d{8}(\.\d+)?\b")
NOW = 1_764_460_800.0  # 2025-11-30T00:00:00Z


def ok(run: Run) -> Run:
    assert run.code == 0, run
    return run


class TestPure:
    def test_since_takes_durations_and_rfc3339(self) -> None:
        """Durations count back from now; RFC 3339 with Z, an offset, or bare (UTC)."""
        assert _time.parse_since("10m", NOW) == NOW - 600
        assert _time.parse_since("2h", NOW) == NOW - 7200
        assert _time.parse_since("1d", NOW) == NOW - 86400
        assert _time.parse_since("90", NOW) == NOW - 90
        assert _time.parse_since("2025-11-29T23:00:00Z", NOW) == NOW - 3600
        assert _time.parse_since("2025-11-30T01:00:00+02:00", NOW) == NOW - 3600
        assert _time.parse_since("2025-11-29T23:00:00", NOW) == NOW - 3600

    @pytest.mark.parametrize("bad", ["yesterday-ish", "", "0m", "-5m", "400d", "10x"])
    def test_since_refuses_nonsense(self, bad: str) -> None:
        with pytest.raises(click.BadParameter, match="duration"):
            _time.parse_since(bad, NOW)

    def test_relative_both_ways(self) -> None:
        assert _time.ago("2025-11-29T23:57:00Z", NOW) == "3m ago"
        assert _time.ago(NOW + 20, NOW) == "in 20s"
        assert _time.ago(None, NOW) == "?"
        assert _time.ago("garbled", NOW) == "?"

    def test_detail_is_local_time_then_relative(self) -> None:
        local = datetime.fromtimestamp(NOW - 180).strftime("%Y-%m-%d %H:%M:%S")

        shown = _time.detail("2025-11-29T23:57:00Z", NOW)

        assert shown.startswith(local + " ")
        assert shown.endswith(" (3m ago)")

    def test_newer_keeps_what_it_cannot_place(self) -> None:
        items = [{"at": "2025-11-29T23:00:00Z"}, {"at": "2025-11-29T23:59:00Z"}, {"at": None}]

        assert _time.newer(items, NOW - 600, "at") == items[1:]
        assert _time.newer(items, None, "at") == items

    def test_oldest_first_by_time_then_id(self) -> None:
        items = [
            {"id": 3, "at": "2025-11-29T23:59:00Z"},
            {"id": 2, "at": "2025-11-29T23:00:00Z"},
            {"id": 1, "at": "2025-11-29T23:59:00Z"},
        ]

        assert [i["id"] for i in _time.oldest_first(items, "at")] == [2, 1, 3]


def _times(doc: Any, path: str = "$") -> list[tuple[str, Any]]:
    """Every (path, value) in a JSON document whose key names a time."""
    found: list[tuple[str, Any]] = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if (k in ("at", "since") or k.endswith("_at") or k == "last_heartbeat") and not (
                isinstance(v, dict | list)
            ):
                found.append((f"{path}.{k}", v))
            found += _times(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            found += _times(v, f"{path}[{i}]")
    return found


@pytest.fixture
def busy(meshctl: Meshctl, daemon: Daemon, short_tmp: Path) -> dict[str, Any]:
    """A mesh with something in every history: claims, messages, notes, board, handoffs,
    a signal and a ledger key."""
    env = daemon.env
    reg = ["register", "--liveness", "heartbeat", "--task"]
    a = ok(meshctl(*reg, "alpha", env=env)).out.strip()
    b = ok(meshctl(*reg, "beta", env=env)).out.strip()
    proj = str(short_tmp)
    steps = [
        ("claim", "--session", a, "res:db", "--reason", "migrating"),
        ("send", "--session", a, b, "first"),
        ("send", "--session", a, b, "second"),
        ("notes", "add", "--session", a, "note one"),
        ("notes", "add", "--session", b, "note two"),
        ("board", "post", "--session", a, "progress", "did stuff", "--project", proj),
        ("board", "changed", "--session", a, f"{proj}/x.py", "--summary", "edit"),
        ("handoff", "write", "--session", a, "--to", b, "take over"),
        ("handoff", "write", "--session", b, "--to", a, "back to you"),
        ("signal", "emit", "done", "--payload", "1"),
        ("once", "--key", "k1", "--", "true"),
    ]
    for step in steps:
        ok(meshctl(*step, env=env))
    return {"env": env, "a": a, "b": b, "proj": proj}


def _listings(w: dict[str, Any]) -> list[list[str]]:
    a, b, proj = w["a"], w["b"], w["proj"]
    return [
        ["sessions", "active"],
        ["sessions", "show", a],
        ["inbox", "--peek", "--session", b],
        ["inbox", "--peek", "--all", "--session", b],
        ["notes", "list"],
        ["board", "show", proj],
        ["board", "files", proj],
        ["handoff", "list", "--all"],
        ["handoff", "show", "1"],
        ["once", "--list"],
        ["log"],
        ["sync", "--session", b],
        ["daemon", "status"],
        ["check", "res:db"],
        ["signal", "wait", "done", "--after", "0"],
    ]


@pytest.mark.slow
class TestWithDaemon:
    def test_people_see_relative_times_and_json_carries_rfc3339(
        self, meshctl: Meshctl, busy: dict[str, Any]
    ) -> None:
        """Human output never shows a raw RFC 3339 stamp or an epoch number; every
        time in --json parses as RFC 3339 UTC."""
        env = busy["env"]
        stamped = 0
        for args in _listings(busy):
            human = meshctl(*args, env=env)
            doc = meshctl(*args, "--json", env=env)
            assert human.code in (0, 75), human
            assert not RAW_RFC3339.search(human.out), human
            assert not EPOCH.search(human.out), human
            for where, value in _times(doc.json()):
                if value in (None, ""):
                    continue
                assert isinstance(value, str), (args, where, value)
                assert RFC3339_UTC.match(value), (args, where, value)
                stamped += 1
        assert stamped > 20
        assert "ago" in ok(meshctl("log", env=env)).out
        # how long ago in whatever unit the time took (past a minute on a loaded machine)
        assert re.search(r" \(\d+[smhd] ago\):", ok(meshctl("handoff", "show", "1", env=env)).out)

    def test_listings_run_oldest_first(self, meshctl: Meshctl, busy: dict[str, Any]) -> None:
        """Inbox, notes, handoffs and the log: newest at the bottom, like a log."""
        env, b = busy["env"], busy["b"]

        inbox = ok(meshctl("inbox", "--peek", "--all", "--session", b, "--json", env=env)).json()
        notes = ok(meshctl("notes", "list", "--json", env=env)).json()
        handoffs = ok(meshctl("handoff", "list", "--all", "--json", env=env)).json()
        ok(meshctl("claim", "--session", busy["a"], "res:two", env=env))
        log = ok(meshctl("log", "--json", env=env)).json()

        assert [i["text"] for i in inbox][:2] == ["first", "second"]
        assert [n["text"] for n in notes] == ["note one", "note two"]
        assert [h["summary"] for h in handoffs] == ["take over", "back to you"]
        assert [e["resource"] for e in log] == ["res:db", "res:two"]

    def test_since_is_one_option_everywhere(self, meshctl: Meshctl, busy: dict[str, Any]) -> None:
        """Every history listing takes --since: a duration keeps what is recent, a time
        in the future keeps nothing, nonsense is a usage error saying what to give."""
        env, b, proj = busy["env"], busy["b"], busy["proj"]
        future = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
        histories: list[tuple[list[str], Any]] = [
            (["inbox", "--peek", "--session", b], lambda d: d),
            (["notes", "list"], lambda d: d),
            (["board", "files", proj], lambda d: d["entries"]),
            (["board", "show", proj], lambda d: d["progress"] + d["changes"]),
            (["handoff", "list", "--all"], lambda d: d),
            (["once", "--list"], lambda d: d),
            (["log"], lambda d: d),
        ]
        for args, rows in histories:
            recent = ok(meshctl(*args, "--since", "1h", "--json", env=env)).json()
            none = ok(meshctl(*args, "--since", future, "--json", env=env)).json()
            bad = meshctl(*args, "--since", "last tuesday", env=env)

            assert rows(recent), args
            assert rows(none) == [], args
            assert bad.code == 2, bad
            assert "give a duration (90s, 10m, 2h, 1d) or an RFC 3339 time" in bad.err

        signal = ok(meshctl("signal", "wait", "done", "--since", "1h", "--json", env=env))
        assert signal.json()["seq"] == 1
