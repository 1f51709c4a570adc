"""One view of a fleet-wide key everywhere (SPEC §12): the reads answer from the fleet.

A claim one host holds on a fleet-wide key is what every host's ``check`` reports;
a broadcast counts the sessions it reached on every host; a handoff addressed to a
session on another host is listed there; a local-only grant says so in its own answer
and is reconciled at once when the link returns. Real nats-server, one meshd per host.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.cli.conftest import run_meshctl
from tests.fleet.conftest import FleetHost, HostFactory
from tests.support import wait_for

FAST = "[defaults]\nheartbeat_interval = 1\n"


def register(h: FleetHost, sid: str, **kw: Any) -> str:
    params = {"session_id": sid, "pid": os.getpid(), "task": f"task of {sid}", **kw}
    return str(h.call("session.register", params)["session_id"])


def acquire(h: FleetHost, sid: str, *resources: str, **kw: Any) -> dict[str, Any]:
    return dict(h.call("claim.acquire", {"session_id": sid, "resources": list(resources), **kw}))


def everywhere(hosts: list[FleetHost], *sids: str) -> None:
    """Wait until every host's registry lists ``sids``."""
    for h in hosts:

        def listed(h: FleetHost = h) -> bool:
            return set(sids) <= {s["session_id"] for s in h.call("session.list")["sessions"]}

        wait_for(listed, what=f"{h.name} to list {sids}")


def test_check_on_another_host_names_the_fleet_holder_and_its_host(
    fleet_hosts: HostFactory,
) -> None:
    """``check res:gpu`` on h2 while h1 holds it: held (exit 75), the holder and h1
    named; before, h2 read only its own table and said "free"."""
    h1, h2 = fleet_hosts(2)
    register(h1, "h1:a")
    register(h2, "h2:b")
    everywhere([h2], "h1:a")
    assert acquire(h1, "h1:a", "res:gpu", reason="training")["status"] == "granted"

    got = h2.call("claim.check", {"resources": ["res:gpu"], "session_id": "h2:b"})
    assert got["status"] == "held"
    assert [(c["session_id"], c["resource"], c["host"]) for c in got["claims"]] == [
        ("h1:a", "res:gpu", "h1")
    ]
    assert got["claims"][0]["task"] == "task of h1:a"
    assert any("h1:a" in w and "h1" in w for w in got["warnings"]), got["warnings"]
    r = run_meshctl("check", "res:gpu", env=h2.env)
    assert r.code == 75, r
    assert "h1:a" in r.out + r.err, r
    assert "on h1" in r.out + r.err, r
    # a local key of the same name on h2 is h2's own business
    assert h2.call("claim.check", {"resources": ["port:80"]})["status"] == "free"

    h1.call("claim.release", {"session_id": "h1:a"})
    wait_for(
        lambda: h2.call("claim.check", {"resources": ["res:gpu"]})["status"] == "free",
        15,
        what="h2 to see the release",
    )


def _held_by(claims: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(c["resource"], c.get("host") or "") for c in claims]


def test_every_read_on_another_host_shows_the_fleet_holder_at_once(
    fleet_hosts: HostFactory,
) -> None:
    """h1:a holds res:gpu (fleet-wide) and port:80 (h1's own); on h2, ``claim.list``
    (``top``, the Hermes tools), ``sessions show h1:a``, the listing ``sync`` reads and
    ``meshctl sync`` show res:gpu held by h1:a on h1 as soon as the bucket's change
    reaches h2's mirror (a watch delivery, not h1's registry entry), and free as soon
    as its release does. Before, ``claim.list`` read h2's table only, and the rest
    showed h1's last registry entry (seconds behind the fleet)."""
    h1, h2 = fleet_hosts(2)
    register(h1, "h1:a")
    register(h2, "h2:b")
    everywhere([h2], "h1:a")
    assert acquire(h1, "h1:a", "port:80")["status"] == "granted"
    everywhere([h2], "h1:a")  # h1's entry with port:80 (a local key: as h1 lists it)
    wait_for(
        lambda: any(s["claims"] for s in h2.call("session.list")["sessions"]),
        what="h2 to list port:80",
    )
    got = acquire(h1, "h1:a", "res:gpu", reason="training")
    assert got["status"] == "granted"

    def listed_now() -> list[dict[str, Any]]:
        return list(h2.call("claim.list")["claims"])

    # the listings read h2's mirror of the bucket: as soon as the watch delivers the
    # commit record (docs/FLEET.md, "Listings"), before h1's registry entry changes
    listed = wait_for(listed_now, what="h2's mirror to show the grant")
    assert [(c["session_id"], c["resource"], c["host"]) for c in listed] == [
        ("h1:a", "res:gpu", "h1")
    ]
    assert listed[0]["token"] == got["claims"][0]["token"]
    mine = h2.call("claim.list", {"session_id": "h1:a"})["claims"]
    assert _held_by(mine) == [("res:gpu", "h1")]
    assert h2.call("claim.list", {"session_id": "h2:b"})["claims"] == []

    shown = h2.call("session.get", {"session_id": "h1:a"})
    assert shown["host"] == "h1"
    assert sorted(c["resource"] for c in shown["claims"]) == ["port:80", "res:gpu"]
    assert shown["claims_total"] == 2

    [a] = [s for s in h2.call("session.list")["sessions"] if s["session_id"] == "h1:a"]
    assert (a["host"], sorted(c["resource"] for c in a["claims"])) == (
        "h1",
        ["port:80", "res:gpu"],
    )
    env = {**h2.env, "MESH_SESSION": "h2:b"}
    r = run_meshctl("sync", env=env)
    assert r.code == 0, r
    block = r.out.split("h1:a", 1)[1].split("h2:b", 1)[0]
    assert "holds res:gpu" in block, r.out
    doc = json.loads(run_meshctl("--json", "sync", env=env).out)
    [a] = [s for s in doc["sessions"] if s["session_id"] == "h1:a"]
    assert "res:gpu" in {c["resource"] for c in a["claims"]}

    h1.call("claim.release", {"session_id": "h1:a", "resources": ["res:gpu"]})
    wait_for(lambda: not listed_now(), 5, what="h2's mirror to show the release")
    shown = h2.call("session.get", {"session_id": "h1:a"})
    assert [c["resource"] for c in shown["claims"]] == ["port:80"]
    [a] = [s for s in h2.call("session.list")["sessions"] if s["session_id"] == "h1:a"]
    assert [c["resource"] for c in a["claims"]] == ["port:80"]


def test_the_job_radar_names_the_fleet_holder(fleet_hosts: HostFactory) -> None:
    """``meshctl jobs`` on h2: the job's res:gpu is held by h1:a on h1, so it would
    wait for that claim; before, the radar read h2's table and saw nothing."""
    jobs = (
        '[jobs.train]\nresources = ["res:gpu", "box:rig"]\n[jobs.serve]\nresources = ["port:9"]\n'
    )
    h1, h2 = fleet_hosts(2, extra=jobs)  # a job mixing the two sides is refused at load
    register(h1, "h1:a")
    everywhere([h2], "h1:a")  # its task, as h2 lists it
    assert acquire(h1, "h1:a", "res:gpu", reason="training")["status"] == "granted"
    assert acquire(h1, "h1:a", "port:9")["status"] == "granted"  # a set is one or the other

    [job] = h2.call("job.list", {"name": "train"})["jobs"]
    [serve] = h2.call("job.list", {"name": "serve"})["jobs"]

    assert [(w["session_id"], w["resource"], w.get("host")) for w in job["would_wait_for"]] == [
        ("h1:a", "res:gpu", "h1")
    ]
    assert job["would_wait_for"][0]["task"] == "task of h1:a"
    assert serve["would_wait_for"] == []  # port:9 is h1's own business


def test_check_names_a_session_of_another_host_working_at_a_shared_path(
    fleet_hosts: HostFactory, tmp_path: Path
) -> None:
    """h1:a works in a shared folder (its cwd); ``check`` of a file there on h2 names it
    as present, with its host, and says so in the warnings; a path that is not shared
    is each host's own. Before, ``present`` listed h2's own sessions only."""
    shared = tmp_path / "shared"
    (shared / "repo").mkdir(parents=True)
    h1, h2 = fleet_hosts(2, fleet_extra=f'shared_paths = ["{shared}"]')
    register(h1, "h1:a", cwd=str(shared / "repo"))
    register(h1, "h1:c", cwd=str(tmp_path))  # above the shared folder: h1's own place
    register(h2, "h2:b")
    everywhere([h2], "h1:a", "h1:c")

    got = h2.call("claim.check", {"resources": [f"file:{shared}/repo/a.py"], "session_id": "h2:b"})

    assert got["status"] == "free"
    assert [(x["session_id"], x["why"], x["host"]) for x in got["present"]] == [
        ("h1:a", "cwd", "h1")
    ]
    assert any("h1:a is working in" in w and "on h1" in w for w in got["warnings"]), got
    alone = h2.call("claim.check", {"resources": [f"file:{tmp_path}/x.py"]})
    assert alone["present"] == []


def test_a_broadcast_counts_the_sessions_of_every_host(fleet_hosts: HostFactory) -> None:
    """The broadcast reaches h2:b, and its answer says so (before: recipients [])."""
    h1, h2 = fleet_hosts(2)
    register(h1, "h1:a")
    register(h2, "h2:b")
    everywhere([h1], "h2:b")

    got = h1.call("broadcast.send", {"session_id": "h1:a", "text": "deploying"})

    assert got["recipients"] == ["h2:b"]
    items = wait_for(
        lambda: h2.call("message.inbox", {"session_id": "h2:b", "peek": True})["items"],
        15,
        what="the broadcast on h2",
    )
    assert [i["text"] for i in items] == ["deploying"]


def test_a_handoff_to_another_host_is_listed_on_the_addressees_host(
    fleet_hosts: HostFactory,
) -> None:
    """h2:b's ``handoff list`` (and ``--all``) on h2 shows the handoff h1:a wrote to
    it, with its files and steps; before, only its inbox had the text."""
    h1, h2 = fleet_hosts(2)
    register(h1, "h1:a")
    register(h2, "h2:b")
    everywhere([h1], "h2:b")
    h1.call(
        "handoff.write",
        {"session_id": "h1:a", "summary": "auth done", "to": "h2:b", "files": ["/tmp/a.py"],
         "next_steps": ["review"]},
    )  # fmt: skip

    def listed() -> list[dict[str, Any]]:
        return list(h2.call("handoff.list", {"session_id": "h2:b"})["handoffs"])

    [h] = wait_for(listed, what="the handoff in h2's list")
    assert (h["from"], h["to"], h["summary"]) == ("h1:a", "h2:b", "auth done")
    assert (h["files"], h["next_steps"]) == (["/tmp/a.py"], ["review"])
    every = h2.call("handoff.list", {"session_id": "h2:b", "all": True})["handoffs"]
    assert [x["summary"] for x in every] == ["auth done"]
    [item] = h2.call("message.inbox", {"session_id": "h2:b", "peek": True})["items"]
    assert item["kind"] == "handoff"  # delivered once, as before


def test_a_local_only_grant_says_so_in_its_own_answer(fleet_hosts: HostFactory) -> None:
    (h1,) = fleet_hosts(1, extra=FAST, fleet_extra='on_partition = "local"')
    register(h1, "h1:a")
    h1.cut()
    wait_for(lambda: not h1.connected(), 15, what="h1 to notice the cut")

    got = acquire(h1, "h1:a", "res:alone")
    fleet_wide = acquire(h1, "h1:a", "port:1")  # a local key is never local-only

    assert (got["status"], got["local_only"]) == ("granted", True)
    assert [c["local_only"] for c in got["claims"]] == [True]
    assert fleet_wide["local_only"] is False
    shown = h1.call("session.get", {"session_id": "h1:a"})
    assert {c["resource"]: c["local_only"] for c in shown["claims"]} == {
        "res:alone": True,
        "port:1": False,
    }
    [listed] = [s for s in h1.call("session.list")["sessions"] if s["session_id"] == "h1:a"]
    assert {c["resource"]: c["local_only"] for c in listed["claims"]} == {
        "res:alone": True,
        "port:1": False,
    }
    assert any("res:alone" in x for x in h1.status()["local_only"])


HOLD_RECONCILE = """
import os, anyio
from meshd.fleet.claim_upkeep import ClaimUpkeep
HOLD, HELD = {hold!r}, {held!r}
adopt = ClaimUpkeep._adopt
async def _adopt(self, *args, **kw):
    if os.path.exists(HOLD):
        open(HELD, "w").close()
        while os.path.exists(HOLD):
            await anyio.sleep(0.02)
    return await adopt(self, *args, **kw)
ClaimUpkeep._adopt = _adopt
"""


def test_a_local_only_grant_made_while_the_link_reconnects_is_reconciled_at_once(
    fleet_hosts: HostFactory, tmp_path: Path
) -> None:
    """h1 is back on the link but still reconciling (held here) when it grants res:x
    local-only; h2 holds res:x in the fleet. Once the reconcile is let go, h1 gives
    its grant up at once (``fleet-conflict``); before, it stayed beside h2's until
    the next drop (~38 s in the field)."""
    hold, held = tmp_path / "hold", tmp_path / "held"
    fault = HOLD_RECONCILE.format(hold=str(hold), held=str(held))
    h1, h2 = fleet_hosts(
        2, extra=FAST, fleet_extra='on_partition = "local"', hold=fault
    )  # fmt: skip
    register(h1, "h1:a")
    register(h2, "h2:b")
    h1.cut()
    wait_for(lambda: not h1.connected(), 15, what="h1 to notice the cut")
    assert acquire(h2, "h2:b", "res:x")["status"] == "granted"
    hold.touch()
    h1.heal()
    wait_for(held.exists, 30, what="h1 back on the link, reconciling")

    got = acquire(h1, "h1:a", "res:x")  # the link is up, the reconcile is not done
    assert (got["status"], got["local_only"]) == ("granted", True)
    hold.unlink()

    def gone() -> bool:
        return not h1.call("claim.list", {"session_id": "h1:a"})["claims"]

    wait_for(gone, what=lambda: f"h1 to give res:x up: {h1.call('claim.list')}")
    log = h1.call("audit.log")["entries"]
    lost = [(e["resource"], e["how"]) for e in log if e["action"] == "lose"]
    assert lost == [("res:x", "fleet-conflict")], log
    assert not h1.status()["local_only"]
    again = acquire(h1, "h1:a", "res:x")
    assert again["status"] == "held"
    assert [x["host"] for x in again["holders"]] == ["h2"]


def test_check_cut_off_from_the_fleet_says_what_it_could_not_read(
    fleet_hosts: HostFactory,
) -> None:
    """h2 is cut off while h1 holds res:gpu. ``claim.check`` on h2 kept the sentence
    "could not be read" in ``warnings`` only, and ``meshctl check res:gpu`` printed
    "free: no other session claims or works on res:gpu" alone, exit 0: a person saw a
    plain free. The answer says ``fleet_unreachable`` (why), and the command prints
    that the other hosts' claims could not be read; still not held (exit 0: SPEC §5
    gives 75 to an overlapping claim only)."""
    h1, h2 = fleet_hosts(2, extra=FAST)
    register(h1, "h1:a")
    register(h2, "h2:b")
    assert acquire(h1, "h1:a", "res:gpu")["status"] == "granted"
    h2.cut()
    wait_for(lambda: not h2.connected(), 15, what="h2 to notice the cut")

    got = h2.call("claim.check", {"resources": ["res:gpu"], "session_id": "h2:b"})
    human = run_meshctl("check", "res:gpu", env=h2.env)
    local = h2.call("claim.check", {"resources": ["port:80"]})

    assert got["status"] == "free"
    assert got["fleet_unreachable"], got
    assert human.code == 0, human
    assert "could not be read" in human.out, human
    assert "no other session claims" not in human.out, human
    assert local["fleet_unreachable"] == "", local  # a local key asks no fleet


def test_a_broadcast_counts_a_stale_session_of_another_host(fleet_hosts: HostFactory) -> None:
    """SPEC §12: ``recipients`` counts the sessions of every host a broadcast reached.
    A stale session (no heartbeat for ``stale_after``, still live) is reached on its
    own host -- the broadcast lands in its inbox, as a stale session's of the sender's
    host does, and is counted there -- but the other hosts' stale ones were left out
    of the count: ``recipients`` said [] while h2:b got the message."""
    stale = "[defaults]\nheartbeat_interval = 1\nstale_after = 1\n"
    h1, h2 = fleet_hosts(2, extra=stale)
    register(h1, "h1:a")
    register(h2, "h2:b", liveness="heartbeat")
    register(h1, "h1:c", liveness="heartbeat")  # a stale one on the sender's host

    def stale_on_h1(sid: str) -> bool:
        listed = {s["session_id"]: s for s in h1.call("session.list")["sessions"]}
        return sid in listed and bool(listed[sid]["stale"])

    wait_for(lambda: stale_on_h1("h2:b") and stale_on_h1("h1:c"), 15, what="both stale")

    got = h1.call("broadcast.send", {"session_id": "h1:a", "text": "deploying"})

    assert sorted(got["recipients"]) == ["h1:c", "h2:b"]
    items = wait_for(
        lambda: h2.call("message.inbox", {"session_id": "h2:b", "peek": True})["items"],
        15,
        what="the broadcast on h2",
    )
    assert [i["text"] for i in items] == ["deploying"]


def test_the_holder_s_own_host_names_itself_as_the_others_do(fleet_hosts: HostFactory) -> None:
    """One view everywhere (SPEC §12): h2 said h1:a holds res:gpu "on h1" (``host``
    "h1"), and so did ``claim.validate`` on h1, but h1's own ``claim.check`` and
    ``claim.list`` gave ``host`` null for the same fleet-wide claim. A local key stays
    without a host."""
    h1, h2 = fleet_hosts(2)
    register(h1, "h1:a")
    everywhere([h2], "h1:a")
    assert acquire(h1, "h1:a", "res:gpu")["status"] == "granted"
    assert acquire(h1, "h1:a", "port:8080")["status"] == "granted"

    def hosts(h: FleetHost, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {c["resource"]: c.get("host") for c in h.call(method, params)["claims"]}

    for h in (h1, h2):
        assert hosts(h, "claim.check", {"resources": ["res:gpu"]}) == {"res:gpu": "h1"}, h.name
    assert hosts(h1, "claim.list", {}) == {"res:gpu": "h1", "port:8080": None}
    assert hosts(h2, "claim.list", {}) == {"res:gpu": "h1"}
    assert hosts(h1, "claim.check", {"resources": ["port:8080"]}) == {"port:8080": None}
    human = run_meshctl("check", "res:gpu", env=h1.env)
    assert "h1:a holds res:gpu on h1" in human.out, human


def test_check_on_another_host_says_since_when_as_claim_list_does(
    fleet_hosts: HostFactory,
) -> None:
    """h2's ``claim.list`` gave h1's claim on res:gpu its ``since``, but h2's
    ``claim.check`` (and so ``meshctl check`` and ``claim``'s ``held``) said ``since: ""``
    for the same claim: two answers for one key on one host."""
    h1, h2 = fleet_hosts(2)
    register(h1, "h1:a")
    register(h2, "h2:b")
    everywhere([h2], "h1:a")
    assert acquire(h1, "h1:a", "res:gpu")["status"] == "granted"

    def listed() -> str:
        claims = h2.call("claim.list")["claims"]
        return next((c["since"] for c in claims if c["resource"] == "res:gpu"), "")

    since = wait_for(listed, what="h2 to list h1's claim")
    checked = h2.call("claim.check", {"resources": ["res:gpu"], "session_id": "h2:b"})

    assert [(c["host"], c["since"]) for c in checked["claims"]] == [("h1", since)]


def test_a_local_only_grant_says_so_to_a_person_too(fleet_hosts: HostFactory) -> None:
    """The human forms of ``claim``, ``sessions show`` and ``sync`` mark a local-only
    claim as the JSON does; before, only ``--json`` and ``fleet status`` said it."""
    (h1,) = fleet_hosts(1, extra=FAST, fleet_extra='on_partition = "local"')
    register(h1, "h1:a")
    h1.cut()
    wait_for(lambda: not h1.connected(), 15, what="h1 to notice the cut")

    granted = run_meshctl("claim", "res:alone", "--session", "h1:a", env=h1.env)
    local = run_meshctl("claim", "port:1", "--session", "h1:a", env=h1.env)
    shown = run_meshctl("sessions", "show", "h1:a", env=h1.env)
    synced = run_meshctl("sync", "--session", "h1:a", env=h1.env)

    assert granted.code == 0, granted
    assert "local-only" in granted.out, granted
    assert "local-only" not in local.out, local  # a local key is never local-only
    [alone] = [line for line in shown.out.splitlines() if "res:alone" in line]
    [port] = [line for line in shown.out.splitlines() if "port:1" in line]
    assert "local-only" in alone, shown
    assert "local-only" not in port, shown
    [alone] = [line for line in synced.out.splitlines() if "res:alone" in line]
    assert "local-only" in alone, synced
