"""One view of a fleet-wide claim's holder (SPEC §12): what a host other than the
holding one reports of it -- its reason, and in a ``held`` answer its own resource --
is what the holding host reports. Real nats-server, one meshd per host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli.conftest import run_meshctl
from tests.fleet.conftest import FleetHost, HostFactory
from tests.fleet.test_one_view import acquire, everywhere, register
from tests.support import wait_for


def held_line(h: FleetHost, resource: str) -> str:
    """``meshctl check``'s human ``held:`` line for ``resource`` on host ``h``."""
    r = run_meshctl("check", resource, env=h.env)
    assert r.code == 75, r
    [line] = [x for x in (r.out + r.err).splitlines() if x.startswith("held:")]
    return line


def test_every_host_reports_the_reason_a_fleet_claim_was_taken_for(
    fleet_hosts: HostFactory,
) -> None:
    """h1:a claims res:gpu7 for "big run"; on h2, ``check`` (JSON and human),
    ``claim.list`` and ``sessions show`` give that reason, as h1 does. Before, the
    fleet's records did not carry it: h2 said ``reason: ""`` everywhere, and its human
    line ended with the session's task ("— train") where h1's ended "— big run"."""
    h1, h2 = fleet_hosts(2)
    register(h1, "h1:a", task="train")
    register(h2, "h2:b")
    everywhere([h2], "h1:a")
    assert acquire(h1, "h1:a", "res:gpu7", reason="big run")["status"] == "granted"

    got = h2.call("claim.check", {"resources": ["res:gpu7"], "session_id": "h2:b"})
    assert [(c["resource"], c["host"], c["reason"], c["task"]) for c in got["claims"]] == [
        ("res:gpu7", "h1", "big run", "train")
    ]
    assert any(w.endswith("— big run") for w in got["warnings"]), got["warnings"]
    there = held_line(h2, "res:gpu7")
    assert there.endswith("— big run"), there
    assert held_line(h1, "res:gpu7").endswith("— big run")
    doc = json.loads(run_meshctl("--json", "check", "res:gpu7", env=h2.env).out)
    assert [c["reason"] for c in doc["claims"]] == ["big run"]

    def listed() -> list[dict[str, Any]]:
        return list(h2.call("claim.list")["claims"])

    claims = wait_for(listed, what="h2's mirror to show the grant")
    assert [(c["resource"], c["reason"]) for c in claims] == [("res:gpu7", "big run")]
    shown = h2.call("session.get", {"session_id": "h1:a"})
    assert [(c["resource"], c["reason"]) for c in shown["claims"]] == [("res:gpu7", "big run")]
    r = run_meshctl("--json", "sessions", "show", "h1:a", env=h2.env)
    assert r.code == 0, r
    assert [c["reason"] for c in json.loads(r.out)["claims"]] == ["big run"]


def test_a_fleet_claim_without_a_reason_reports_none(fleet_hosts: HostFactory) -> None:
    """No reason given: none reported on the other host, and its human line ends with
    the holder's task, as on the holding host."""
    h1, h2 = fleet_hosts(2)
    register(h1, "h1:a", task="train")
    everywhere([h2], "h1:a")
    assert acquire(h1, "h1:a", "res:gpu8")["status"] == "granted"

    got = h2.call("claim.check", {"resources": ["res:gpu8"]})
    assert [(c["reason"], c["task"]) for c in got["claims"]] == [("", "train")]
    assert held_line(h2, "res:gpu8").endswith("— train")
    claims = wait_for(lambda: h2.call("claim.list")["claims"], 5, what="h2's mirror")
    assert [c["reason"] for c in claims] == [""]


def test_a_held_claim_on_a_shared_folder_names_the_holders_own_claim(
    fleet_hosts: HostFactory, tmp_path: Path
) -> None:
    """h1:a holds a file in a shared folder; a claim of the folder -- on h2, and by
    another session on h1 -- is held, and its answer names the holder as ``check``
    does: its own resource (the file), task, since and reason, and its host. Before,
    it named the key asked for (``file:<folder>``) with no task, since or reason."""
    shared = tmp_path / "shared"
    (shared / "proj").mkdir(parents=True)
    h1, h2 = fleet_hosts(2, fleet_extra=f'shared_paths = ["{shared}"]')
    register(h1, "h1:a", task="train")
    register(h1, "h1:c")
    register(h2, "h2:b")
    everywhere([h2], "h1:a")
    held_file = f"file:{shared}/proj/a.py"
    assert acquire(h1, "h1:a", held_file, reason="big run")["status"] == "granted"
    wait_for(lambda: h2.call("claim.list")["claims"], 5, what="h2's mirror to show the grant")

    for h, sid in ((h2, "h2:b"), (h1, "h1:c")):
        got = acquire(h, sid, f"file:{shared}")
        assert got["status"] == "held", got
        checked = h.call("claim.check", {"resources": [f"file:{shared}"], "session_id": sid})
        fields = ("session_id", "resource", "host", "task", "since", "reason", "mode")
        assert [{f: c[f] for f in fields} for c in got["holders"]] == [
            {f: c[f] for f in fields} for c in checked["claims"]
        ]
        [holder] = got["holders"]
        assert (holder["resource"], holder["host"], holder["task"], holder["reason"]) == (
            held_file,
            "h1",
            "train",
            "big run",
        )
        assert holder["since"], holder

    r = run_meshctl("--json", "claim", str(shared), env={**h2.env, "MESH_SESSION": "h2:b"})
    assert r.code == 75, r
    [holder] = json.loads(r.out)["holders"]
    assert (holder["resource"], holder["reason"]) == (held_file, "big run")
