"""The fleet link (SPEC §12): it connects, says so, survives a NATS crash and a cut
cable, and a daemon whose NATS is out of reach serves its local calls all the same."""

from __future__ import annotations

import os

import pytest
from tests.conftest import DaemonHandle, MeshEnv
from tests.fleet.conftest import HostFactory, NatsServer, free_port
from tests.fleet.secure import FLAVOURS
from tests.support import wait_for


def test_status_without_fleet_says_not_configured(daemon: DaemonHandle) -> None:
    st = daemon.call("fleet.status")["result"]

    assert st["configured"] is False
    assert st["connected"] is False


def test_link_comes_up_and_reports_the_server(fleet_hosts: HostFactory) -> None:
    (h1,) = fleet_hosts(1)

    st = h1.status()
    assert st["configured"]
    assert st["connected"]
    assert st["host"] == "h1"
    major, minor, _ = (int(x) for x in st["server_version"].split("."))
    assert (major, minor) >= (2, 11)  # per-key TTL
    assert st["connects"] == 1
    assert st["last_error"] is None


def test_unreachable_server_still_serves_local_calls(mesh_env: MeshEnv) -> None:
    """[fleet] pointing at a port nobody listens on: the daemon starts, registers,
    claims and lists as ever, and fleet status says what it cannot reach."""
    port = free_port()
    mesh_env.write_config(f'[fleet]\nurl = "nats://127.0.0.1:{port}"\nname = "alone"\n')
    d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
    d.start()
    try:
        sid = d.call("session.register", {"task": "t", "pid": os.getpid()})["result"]["session_id"]
        claim = d.call("claim.acquire", {"session_id": sid, "resources": ["port:8080"]})
        assert claim["result"]["status"] == "granted"
        listed = d.call("session.list")["result"]["sessions"]
        assert [s["session_id"] for s in listed] == [sid]

        st = wait_for(
            lambda: (s := d.call("fleet.status")["result"])["last_error"] and s,
            what="the link's error",
        )
        assert st["configured"]
        assert not st["connected"]
        assert st["urls"] == [f"nats://127.0.0.1:{port}"]
    finally:
        d.stop()


@pytest.mark.flavours(*FLAVOURS)
def test_link_comes_back_after_nats_is_killed(
    fleet_hosts: HostFactory, nats_server: NatsServer
) -> None:
    (h1,) = fleet_hosts(1)

    nats_server.kill()
    wait_for(lambda: not h1.connected(), 15, what="the link to notice the crash")
    nats_server.start()
    h1.wait_connected()
    assert h1.status()["connects"] == 2


@pytest.mark.flavours(*FLAVOURS)
def test_cut_and_heal_one_host(fleet_hosts: HostFactory) -> None:
    """A cut link is noticed by its pings (every heartbeat_interval), then comes back."""
    h1, h2 = fleet_hosts(2, extra="[defaults]\nheartbeat_interval = 1\n")

    h1.cut()
    wait_for(lambda: not h1.connected(), 15, what="h1 to notice the cut")
    assert h2.connected()
    h1.heal()
    h1.wait_connected()


@pytest.mark.parametrize("key", ["nkey", "tls_ca"])
def test_an_unusable_file_is_reported_never_fatal(
    mesh_env: MeshEnv, nats_server: NatsServer, key: str
) -> None:
    """A seed or CA file that cannot be used: the daemon keeps serving, and fleet
    status says what is wrong with the file (it was only checked to exist at load)."""
    bad = mesh_env.root / "bad.file"
    bad.write_text("this is not a key, a certificate or a creds file\n")
    mesh_env.write_config(f'[fleet]\nurl = "{nats_server.url}"\n{key} = "{bad}"\n')
    d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
    d.start()
    try:
        st = wait_for(
            lambda: (s := d.call("fleet.status")["result"])["last_error"] and s,
            what="the file's error",
        )
        assert not st["connected"]
        assert d.call("mesh.ping")["result"]["pong"]
        sid = d.call("session.register", {"task": "t", "pid": os.getpid()})["result"]["session_id"]
        assert [s["session_id"] for s in d.call("session.list")["result"]["sessions"]] == [sid]
        assert d.proc is not None
        assert d.proc.poll() is None
    finally:
        d.stop()
