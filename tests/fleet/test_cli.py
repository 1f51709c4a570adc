"""``meshctl fleet status|join|leave``, ``sessions active`` across hosts and ``--local``,
and doctor's fleet check -- the real command line against real daemons and NATS."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.cli.conftest import run_meshctl
from tests.conftest import DaemonHandle, MeshEnv
from tests.fleet.conftest import HostFactory, NatsServer, free_port
from tests.support import wait_for


def by_name(doc: dict) -> dict:
    return {c["name"]: c for c in doc["checks"]}


def test_status_without_fleet(daemon: DaemonHandle, mesh_env: MeshEnv) -> None:
    r = run_meshctl("fleet", "status", env=mesh_env.env)

    assert r.code == 0, r
    assert "not in a fleet" in r.out
    assert str(mesh_env.config) in r.out
    assert "meshctl fleet join" in r.out
    j = run_meshctl("fleet", "status", "--json", env=mesh_env.env)
    assert j.json()["configured"] is False


def test_status_shows_link_and_hosts(fleet_hosts: HostFactory) -> None:
    h1, h2 = fleet_hosts(2)
    h2.call("session.register", {"task": "gateway", "pid": os.getpid()})
    wait_for(
        lambda: [h["sessions"] for h in h1.status()["hosts"]] == [1], what="h2's session on h1"
    )
    wait_for(lambda: h1.status()["published_s"] is not None, what="h1 published")

    r = run_meshctl("fleet", "status", env=h1.env)
    assert r.code == 0, r
    assert f"connected to {h1.link.url}" in r.out
    assert "as host h1" in r.out
    assert "- h2 — 1 session, heard from" in r.out
    assert "Fleet-wide claims: box, account, cron, gateway, res; when cut off: fail" in r.out
    assert "Local-only now: nothing" in r.out
    doc = run_meshctl("fleet", "status", "--json", env=h1.env).json()
    assert doc["connected"] is True
    assert [(h["host"], h["sessions"]) for h in doc["hosts"]] == [("h2", 1)]


def test_sessions_active_names_hosts_and_local_lists_own(fleet_hosts: HostFactory) -> None:
    h1, h2 = fleet_hosts(2)
    mine = h1.call("session.register", {"task": "laptop work", "pid": os.getpid()})["session_id"]
    theirs = h2.call("session.register", {"task": "vps work", "pid": os.getpid()})["session_id"]
    wait_for(lambda: len(h1.call("session.list")["sessions"]) == 2, what="both sessions on h1")

    r = run_meshctl("sessions", "active", env=h1.env)
    assert r.code == 0, r
    assert f"- {mine} — laptop work, on h1," in r.out
    assert f"- {theirs} — vps work, on h2," in r.out
    rows = run_meshctl("sessions", "active", "--json", env=h1.env).json()
    assert {s["session_id"]: s["host"] for s in rows} == {mine: "h1", theirs: "h2"}
    local = run_meshctl("sessions", "active", "--local", "--json", env=h1.env).json()
    assert [s["session_id"] for s in local] == [mine]
    human_local = run_meshctl("sessions", "active", "--local", env=h1.env)
    assert " on h1" not in human_local.out  # one host: no host on each line


def test_sync_names_the_host_of_each_session_as_sessions_active_does(
    fleet_hosts: HostFactory,
) -> None:
    """``sync`` reads the same listing as ``sessions active`` (SPEC §12: every host's
    sessions, with their host) but printed its lines without the host, so h2's session
    looked like one of h1's."""
    h1, h2 = fleet_hosts(2)
    mine = h1.call("session.register", {"task": "laptop work", "pid": os.getpid()})["session_id"]
    theirs = h2.call("session.register", {"task": "vps work", "pid": os.getpid()})["session_id"]
    wait_for(lambda: len(h1.call("session.list")["sessions"]) == 2, what="both sessions on h1")

    r = run_meshctl("sync", "--session", mine, env=h1.env)

    assert r.code == 0, r
    assert f"- {mine} — laptop work, on h1," in r.out, r
    assert f"- {theirs} — vps work, on h2," in r.out, r


@pytest.mark.flavours("plain")  # the config text it checks is a plain URL's
def test_join_then_leave_reloads_the_daemon(
    nats_server: NatsServer, mesh_env: MeshEnv, daemon: DaemonHandle
) -> None:
    mesh_env.write_config("# my settings\n[defaults]\nstale_after = 9\n")

    r = run_meshctl("fleet", "join", nats_server.url, "--name", "solo", env=mesh_env.env)
    assert r.code == 0, r
    assert "The daemon reloaded it." in r.out
    assert "as host solo" in r.out
    text = mesh_env.config.read_text()
    assert text.startswith("# my settings\n[defaults]\nstale_after = 9\n")
    assert f'[fleet]\nurl = "{nats_server.url}"\nname = "solo"\n' in text
    st = daemon.call("fleet.status")["result"]
    assert (st["connected"], st["host"]) == (True, "solo")
    assert daemon.call("mesh.info")["result"]["config"]["stale_after"] == 9

    r = run_meshctl("fleet", "leave", "--json", env=mesh_env.env)
    assert r.code == 0, r
    assert r.json()["changed"] is True
    assert mesh_env.config.read_text() == "# my settings\n[defaults]\nstale_after = 9\n"
    wait_for(
        lambda: daemon.call("fleet.status")["result"]["configured"] is False,
        what="the daemon to leave",
    )
    again = run_meshctl("fleet", "leave", env=mesh_env.env)
    assert again.code == 0, again
    assert "was not in a fleet" in again.out


def test_after_leave_returns_the_host_is_alone(
    nats_server: NatsServer, mesh_env: MeshEnv, daemon: DaemonHandle
) -> None:
    """``fleet leave`` says "This host's mesh is on its own" once the daemon reloaded;
    the fleet then kept running until the next tick noticed the change and its link
    closed, so a ``fleet status`` right after said "connected" and a fleet-wide claim
    still went to NATS. What the daemon answers after the reload is this host alone."""
    r = run_meshctl("fleet", "join", nats_server.url, "--name", "solo", env=mesh_env.env)
    assert r.code == 0, r
    wait_for(lambda: daemon.call("fleet.status")["result"]["connected"], what="joined")
    sid = daemon.call("session.register", {"task": "t", "pid": os.getpid()})["result"]

    left = run_meshctl("fleet", "leave", env=mesh_env.env)
    status = run_meshctl("fleet", "status", "--json", env=mesh_env.env)
    nats_server.kill()  # a fleet-wide claim now can only be granted here, alone
    claimed = daemon.call(
        "claim.acquire", {"session_id": sid["session_id"], "resources": ["res:gpu"]}
    )

    assert left.code == 0, left
    assert status.json()["configured"] is False, status
    assert claimed["result"]["status"] == "granted", claimed
    assert claimed["result"]["local_only"] is False, claimed


def test_join_keeps_other_fleet_keys_and_refuses_bad_input(
    mesh_env: MeshEnv, daemon: DaemonHandle, short_tmp: Path
) -> None:
    before = '[fleet]\nurl = "nats://old:4222"\non_partition = "local"\n'
    mesh_env.write_config(before)
    daemon.call("mesh.reload")

    bad = run_meshctl(
        "fleet", "join", "nats://new:4222", "--creds", str(short_tmp / "none.creds"),
        "--json", env=mesh_env.env,
    )  # fmt: skip
    assert bad.code == 1, bad
    assert bad.json()["error"]["data"]["code"] == "CONFIG_INVALID"
    assert "fleet.creds" in bad.err
    assert mesh_env.config.read_text() == before  # nothing changed

    creds = short_tmp / "u.creds"
    creds.write_text("not really")
    ok = run_meshctl("fleet", "join", "nats://new:4222", "--creds", str(creds), env=mesh_env.env)
    assert ok.code == 0, ok
    assert mesh_env.config.read_text() == (
        f'[fleet]\nurl = "nats://new:4222"\ncreds = "{creds}"\non_partition = "local"\n'
    )


def test_join_without_a_daemon_only_writes(nats_server: NatsServer, mesh_env: MeshEnv) -> None:
    r = run_meshctl("fleet", "join", nats_server.url, env=mesh_env.env)

    assert r.code == 0, r
    assert "No daemon runs now: it joins when it starts." in r.out
    assert not mesh_env.socket.exists()


def test_doctor_fleet_check(
    nats_server: NatsServer, mesh_env: MeshEnv, daemon: DaemonHandle
) -> None:
    env = {**mesh_env.env, "MESH_SERVICE_MANAGER": "none"}
    alone = by_name(run_meshctl("doctor", "--json", env=env).json())["fleet"]
    assert alone["status"] == "ok"
    assert "not configured" in alone["message"]

    mesh_env.write_config(
        f'[fleet]\nurl = "{nats_server.url}"\nname = "d1"\n{nats_server.fleet_keys("d1")}'
    )
    daemon.call("mesh.reload")
    wait_for(lambda: daemon.call("fleet.status")["result"]["connected"], what="connected")
    ok = by_name(run_meshctl("doctor", "--json", env=env).json())["fleet"]
    assert ok["status"] == "ok"
    assert f"connected to {nats_server.url}" in ok["message"]
    assert "as host d1" in ok["message"]

    port = free_port()
    mesh_env.write_config(f'[fleet]\nurl = "nats://127.0.0.1:{port}"\n')
    daemon.call("mesh.reload")
    wait_for(
        lambda: (s := daemon.call("fleet.status")["result"])["last_error"] and not s["connected"],
        what="the unreachable link",
    )
    r = run_meshctl("doctor", "--json", env=env)
    assert r.code == 1, r
    bad = by_name(r.json())["fleet"]
    assert bad["status"] == "fail"
    assert f"cannot reach the fleet at nats://127.0.0.1:{port}" in bad["message"]
    assert "meshctl fleet leave" in bad["fix"]


def test_join_offers_the_claims_taken_before_it_to_the_fleet(
    fleet_hosts: HostFactory, nats_server: NatsServer, mesh_env: MeshEnv, daemon: DaemonHandle
) -> None:
    """A host alone holds fleet-wide keys, then ``fleet join``s: the claim nobody else
    holds is taken in the fleet (a fleet token, valid on the other host); the one
    another host holds is lost with a notice saying so. Before, both were lost as if
    this host had been cut off longer than its lease, and, its token counter past the
    bucket's revision (two restarts), every fleet-wide claim after the join was refused
    UNAVAILABLE: "bucket ... below token 8193 already granted"."""
    (h1,) = fleet_hosts(1)
    a = str(h1.call("session.register", {"task": "t", "pid": os.getpid()})["session_id"])
    taken = {"session_id": a, "resources": ["res:taken"]}
    assert h1.call("claim.acquire", taken)["status"] == "granted"
    for n in range(2):  # each start that issued a token reserves a block of 4096 more
        s = daemon.call("session.register", {"task": "t", "pid": os.getpid()})["result"]
        bump = {"session_id": s["session_id"], "resources": [f"port:{n + 1}"]}
        assert daemon.call("claim.acquire", bump)["result"]["status"] == "granted"
        daemon.restart()
    s = daemon.call("session.register", {"task": "t", "pid": os.getpid()})["result"]
    sid = s["session_id"]

    def claim(*resources: str) -> dict:
        reply = daemon.call("claim.acquire", {"session_id": sid, "resources": list(resources)})
        assert "result" in reply, reply
        return dict(reply["result"])

    before = claim("res:before")
    assert before["status"] == claim("res:taken")["status"] == "granted"
    assert before["token"] > 8192

    r = run_meshctl("fleet", "join", nats_server.url, "--name", "solo", env=mesh_env.env)
    assert r.code == 0, r

    def settled() -> dict | None:
        st = daemon.call("fleet.status")["result"]
        ready = st.get("parts", {}).get("claims", {}).get("ready")
        return st if st.get("connected") and ready and not st.get("local_only") else None

    wait_for(settled, 30, what=lambda: f"solo to join: {daemon.call('fleet.status')}")
    mine = {
        c["resource"]: c
        for c in daemon.call("claim.list")["result"]["claims"]
        if c["session_id"] == sid
    }
    assert list(mine) == ["res:before"], mine
    token = mine["res:before"]["token"]
    seen = h1.call("claim.validate", {"resource": "res:before", "token": token})
    assert (seen["valid"], seen["session_id"], seen["host"]) == (True, sid, "solo")
    other = h1.call("claim.acquire", {"session_id": a, "resources": ["res:before"]})
    assert other["status"] == "held"
    lost = [e for e in daemon.call("audit.log")["result"]["entries"] if e["action"] == "lose"]
    assert [(e["resource"], e["how"]) for e in lost] == [("res:taken", "fleet-join")]
    inbox = daemon.call("message.inbox", {"session_id": sid, "peek": True})["result"]["items"]
    said = str(inbox)
    assert "before this host joined the fleet" in said, inbox
    assert "cut off" not in said, inbox
    assert claim("res:after")["status"] == "granted"  # fleet-wide claims work at once


def test_join_refuses_a_job_that_could_never_run_in_the_fleet(
    mesh_env: MeshEnv, daemon: DaemonHandle
) -> None:
    """A job mixing fleet-wide and local keys is refused at every claim in a fleet
    (BAD_KEY): ``fleet join`` says so and changes nothing, instead of joining and
    leaving a job that can never run."""
    mixed = '[jobs.mixed]\nresources = ["res:disk9", "port:7001"]\n'
    mesh_env.write_config(mixed)
    assert "result" in daemon.call("mesh.reload")

    bad = run_meshctl("fleet", "join", "nats://new:4222", "--json", env=mesh_env.env)

    assert bad.code == 1, bad
    assert bad.json()["error"]["data"]["code"] == "CONFIG_INVALID"
    assert "jobs.mixed.resources" in bad.err
    assert "split it into two jobs" in bad.err
    assert mesh_env.config.read_text() == mixed
    assert daemon.call("fleet.status")["result"]["configured"] is False


def test_a_join_written_while_the_daemon_was_stopped_offers_its_claims_at_start(
    nats_server: NatsServer, mesh_env: MeshEnv, daemon: DaemonHandle
) -> None:
    """The daemon ran alone and held res:before; ``fleet join`` with no daemon running
    only writes the file; the next start joins. The claim restored is offered to the
    fleet (it never was the fleet's) and kept with a fleet token. Before, the start
    took it for a restart's fleet claim missing in the bucket and lost it, "cut off
    from the fleet longer than its lease"."""
    s = daemon.call("session.register", {"task": "t", "pid": os.getpid()})["result"]
    sid = s["session_id"]
    claim = {"session_id": sid, "resources": ["res:before"]}
    old = daemon.call("claim.acquire", claim)["result"]
    assert old["status"] == "granted"
    daemon.stop()
    r = run_meshctl("fleet", "join", nats_server.url, "--name", "solo", env=mesh_env.env)
    assert r.code == 0, r

    daemon.start()

    def held() -> dict | None:
        st = daemon.call("fleet.status")["result"]
        if not st.get("parts", {}).get("claims", {}).get("ready") or st.get("local_only"):
            return None
        claims = daemon.call("claim.list")["result"]["claims"]
        return {c["resource"]: c for c in claims if c["session_id"] == sid}

    mine = wait_for(held, 30, what=lambda: f"solo to join: {daemon.call('fleet.status')}")
    assert list(mine) == ["res:before"], mine
    token = mine["res:before"]["token"]
    got = daemon.call("claim.validate", {"resource": "res:before", "token": token})["result"]
    assert (got["valid"], got["host"]) == (True, "solo")
    assert [e for e in daemon.call("audit.log")["result"]["entries"] if e["action"] == "lose"] == []
