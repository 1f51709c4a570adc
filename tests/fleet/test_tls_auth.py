"""The fleet over TLS with a CA made here and a login per host (SPEC §12).

A real nats-server with a certificate signed by a CA this test makes, admitting one
login per host: a user nkey (``tls-nkey``) or a creds file, a user JWT of an account
the server preloads (``tls-creds``) -- tests/fleet/secure.py makes both offline.
Two hosts join with ``tls://``, ``tls_ca`` and their own login, see each other's
sessions and share a fleet-wide claim. A host that trusts another CA, or whose login
the server does not know, is refused, and ``fleet status`` and ``doctor`` say why in
one line. With ``tls://`` configured and a server that does not speak TLS, nothing
is sent in clear: a relay that records every byte sees no ``CONNECT`` and no secret;
and between two hosts over TLS, relays that record both ways see no subject, no
session task and no message text.
The rest of the fleet suite runs on these flavours too (``MESH_FLEET_FLAVOUR``, and
the tests marked ``flavours``). docs/FLEET.md ("TLS and a key per host") is written
from what this file does.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import DaemonHandle
from tests.fleet.conftest import HostFactory, NatsServer
from tests.fleet.secure import Access, Operator, make_ca, new_key, write_seed
from tests.support import wait_for

SECURE = pytest.mark.flavours("tls-nkey", "tls-creds")


@pytest.fixture
def hosts() -> Iterator[list[DaemonHandle]]:
    made: list[DaemonHandle] = []
    yield made
    for d in made:
        if d.proc is not None and d.proc.poll() is None:
            d.stop()
        shutil.rmtree(d.state_dir.parent, ignore_errors=True)


def host(made: list[DaemonHandle], name: str, fleet: str) -> DaemonHandle:
    """A meshd "host" of its own (folders, name) with this ``[fleet]`` table, on this
    machine's network (the refusals need no second host)."""
    root = Path(tempfile.mkdtemp(prefix=f"mh{name}-", dir="/tmp"))
    runtime = root / "run"
    runtime.mkdir(mode=0o700)
    (root / "config.toml").write_text(f'[fleet]\nname = "{name}"\n{fleet}')
    env = {
        **os.environ,
        "MESH_SOCKET": str(runtime / "meshd" / "test.sock"),
        "MESH_STATE_DIR": str(root / "state"),
        "MESH_CONFIG": str(root / "config.toml"),
        "XDG_RUNTIME_DIR": str(runtime),
        "MESH_PROFILE": "test",
    }
    env.pop("MESH_SESSION", None)
    d = DaemonHandle(env=env, socket=runtime / "meshd" / "test.sock", state_dir=root / "state")
    made.append(d)
    d.start()
    return d


def status(d: DaemonHandle) -> dict[str, Any]:
    result: dict[str, Any] = d.call("fleet.status")["result"]
    return result


def refusal(d: DaemonHandle) -> dict[str, Any]:
    """The fleet status once the link has failed at least once."""
    got: dict[str, Any] = wait_for(
        lambda: (s := status(d))["last_error"] and s, 20, what=lambda: status(d)
    )
    return got


def doctor_fleet(env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "meshctl.cli", "doctor", "--json"],
        env={**env, "MESH_SPAWN": "direct"}, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    fleet: dict[str, Any] = checks["fleet"]
    return fleet


def fleet_status_line(env: dict[str, str]) -> str:
    """What ``meshctl fleet status`` prints first: the link's state and why."""
    done = subprocess.run(
        [sys.executable, "-m", "meshctl.cli", "fleet", "status"],
        env={**env, "MESH_SPAWN": "direct"}, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    return done.stdout.splitlines()[0]


def access(server: NatsServer) -> Access:
    assert server.access is not None
    assert server.access.ca is not None
    return server.access


def stranger_login(server: NatsServer, folder: Path) -> str:
    """``[fleet]`` lines with the right CA and a login the server does not know: an
    nkey it does not list, or creds from an operator it does not trust."""
    if access(server).flavour == "tls-nkey":
        kind, path = "nkey", write_seed(folder / "stranger.nk", new_key("user"))
    else:
        kind, path = "creds", Operator().creds(folder / "stranger.creds", "stranger")
    return f'tls_ca = "{access(server).ca}"\n{kind} = "{path}"\n'


@SECURE
def test_two_hosts_each_with_its_own_login_share_the_fleet_over_tls(
    fleet_hosts: HostFactory, nats_server: NatsServer
) -> None:
    laptop, vps = fleet_hosts(2)
    a = laptop.call("session.register", {"task": "train", "pid": os.getpid()})
    b = vps.call("session.register", {"task": "deploy", "pid": os.getpid()})

    seen = wait_for(lambda: len(s := vps.call("session.list")["sessions"]) == 2 and s, 20)
    got = laptop.call("claim.acquire", {"session_id": a["session_id"], "resources": ["res:gpu"]})
    held = vps.call("claim.acquire", {"session_id": b["session_id"], "resources": ["res:gpu"]})

    assert laptop.link.url.startswith("tls://")
    assert {s["host"] for s in seen} == {"h1", "h2"}
    assert got["status"] == "granted"
    assert held["status"] == "held"
    assert [h["host"] for h in held["holders"]] == ["h1"]
    assert laptop.status()["server"].startswith("tls://")
    kind = "nkey" if access(nats_server).flavour == "tls-nkey" else "creds"
    assert f"\n{kind} = " in laptop.config.read_text()
    assert doctor_fleet(vps.env)["status"] == "ok"


@SECURE
def test_a_server_certificate_from_a_ca_not_trusted_is_refused(
    nats_server: NatsServer, hosts: list[DaemonHandle]
) -> None:
    rogue, _ = make_ca(nats_server.root, "rogue-ca")
    login = nats_server.fleet_keys("laptop").replace(str(access(nats_server).ca), str(rogue))
    d = host(hosts, "laptop", f'url = "{nats_server.url}"\n{login}')

    st = refusal(d)
    doctor = doctor_fleet(d.env)
    line = fleet_status_line(d.env)

    assert st["connected"] is False
    assert "certificate verify failed" in st["last_error"]
    assert doctor["status"] != "ok"
    assert "certificate verify failed" in doctor["message"]
    assert "\n" not in doctor["message"]
    assert "certificate verify failed" in line
    assert "result" in d.call("session.register", {"task": "t", "pid": os.getpid()})


@SECURE
def test_a_login_the_server_does_not_know_is_refused(
    nats_server: NatsServer, hosts: list[DaemonHandle]
) -> None:
    d = host(hosts, "stranger", f'url = "{nats_server.url}"\n'
                                f"{stranger_login(nats_server, nats_server.root)}")  # fmt: skip

    st = refusal(d)
    doctor = doctor_fleet(d.env)
    line = fleet_status_line(d.env)

    assert st["connected"] is False
    assert "authorization" in st["last_error"].lower()
    assert "authorization" in doctor["message"].lower()
    assert "\n" not in doctor["message"]
    assert "authorization" in line.lower()
    assert "result" in d.call("session.register", {"task": "t", "pid": os.getpid()})


class Recorder:
    """A TCP relay in front of a server that keeps every byte that crosses it:
    ``sent`` what the clients sent, ``received`` what the server sent them."""

    def __init__(self, port: int, target: str = "127.0.0.1") -> None:
        self.target = (target, port)
        self.sent = bytearray()
        self.received = bytearray()
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(8)
        self.port = self.lsock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            try:
                s = socket.create_connection(self.target)
            except OSError:
                c.close()
                continue
            threading.Thread(target=self._pipe, args=(c, s, self.sent), daemon=True).start()
            threading.Thread(target=self._pipe, args=(s, c, self.received), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, record: bytearray) -> None:
        try:
            while data := src.recv(65536):
                record += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for x in (src, dst):
                try:
                    x.close()
                except OSError:
                    pass

    def close(self) -> None:
        self.lsock.close()


@SECURE
def test_over_tls_no_subject_task_or_text_crosses_in_clear(
    nats_server: NatsServer, hosts: list[DaemonHandle]
) -> None:
    """Two hosts on the TLS server, each through a relay that records both ways: a
    session's task, a message's text and the subjects they travel on reach the
    other host, and none of them is on the wire in clear."""
    relays = [Recorder(nats_server.port, nats_server.host) for _ in range(2)]
    scheme = nats_server.scheme
    try:
        laptop, vps = (
            host(
                hosts,
                name,
                f'url = "{scheme}://127.0.0.1:{r.port}"\n{nats_server.fleet_keys(name)}',
            )
            for name, r in zip(("laptop", "vps"), relays, strict=True)
        )
        for d in (laptop, vps):
            wait_for(lambda d=d: status(d)["connected"], 20, what=lambda d=d: status(d))
        task, text = "secret-task-7f3a", "secret-text-91c2"
        laptop.call("session.register", {"session_id": "a", "task": task, "pid": os.getpid()})
        vps.call("session.register", {"session_id": "b", "task": "b", "pid": os.getpid()})
        wait_for(lambda: len(vps.call("session.list")["result"]["sessions"]) == 2, 20)
        wait_for(lambda: len(laptop.call("session.list")["result"]["sessions"]) == 2, 20)
        sent = laptop.call("message.send", {"session_id": "a", "to": "b", "text": text})
        got = wait_for(
            lambda: vps.call("message.inbox", {"session_id": "b", "peek": True})["result"]["items"],
            20,
        )
        seen = {s["session_id"]: s["task"] for s in vps.call("session.list")["result"]["sessions"]}
        wire = bytes(relays[0].sent + relays[0].received + relays[1].sent + relays[1].received)
    finally:
        for r in relays:
            r.close()

    assert sent["result"]["host"] == "vps"
    assert [i["text"] for i in got] == [text]
    assert seen["a"] == task
    assert len(wire) > 10_000  # the fleet talked through the relays
    for clear in (task.encode(), text.encode(), b"mesh.", b"$JS.", b"CONNECT", b"PUB ", b"MSG "):
        assert clear not in wire, clear


@SECURE
def test_with_tls_configured_nothing_is_sent_in_clear(
    nats_server: NatsServer, hosts: list[DaemonHandle]
) -> None:
    """A server that does not speak TLS (a plain one, as a man in the middle would be):
    the host refuses it and its login (CONNECT, with the key's signature or the JWT)
    never crosses the wire, nor its seed."""
    root = nats_server.root / "plain"
    root.mkdir()
    plain = NatsServer(root)
    plain.start()
    relay = Recorder(plain.port)
    login = nats_server.fleet_keys("laptop")
    secret = Path(login.split('"')[-2]).read_text().split("-----")  # seed, or JWT and seed
    try:
        d = host(hosts, "laptop", f'url = "tls://127.0.0.1:{relay.port}"\n{login}')
        st = refusal(d)
        sent = bytes(relay.sent)
    finally:
        relay.close()
        plain.stop()

    assert st["connected"] is False
    assert "does not speak TLS" in st["last_error"]
    assert b"CONNECT" not in sent
    for part in (p.strip() for p in secret if len(p.strip()) > 40):
        assert part.encode() not in sent
