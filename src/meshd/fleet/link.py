"""The connections this daemon keeps to the fleet's NATS server (SPEC §12).

:class:`FleetLink` owns the nats-py clients: it connects in the background (the
daemon serves local calls from the first moment, whether NATS is there or not),
lets nats-py reconnect after a drop, and tells whoever registered with
:meth:`FleetLink.on_change` each time the link goes up or down. It also names
everything this profile keeps in NATS, so two profiles (or two users on one
server) never meet: every bucket, stream and subject carries the profile.

Two connections, one link: ``nc`` carries the requests (KV writes and reads, asks,
mail) and ``watch_nc`` the KV watches, whose deliveries come with every write any
host makes. On one socket those deliveries are read and handled between a claim's
acknowledgements and delay them (docs/PERFORMANCE.md measured a watch alone making
two KV writes 1.3-1.45x slower). The link is up only while both are.

This module imports nats-py; only :mod:`meshd.fleet` imports this module, and
only when ``[fleet]`` is configured.
"""

from __future__ import annotations

import logging
import math
import re
import ssl
from collections.abc import Callable
from typing import Any

import anyio
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from meshd.core.settings import FleetSettings
from meshd.ports import FleetDown

log = logging.getLogger("meshd.fleet")

CONNECT_TIMEOUT = 2
"""Seconds one connection attempt may take."""
RECONNECT_WAIT = 1
"""Seconds nats-py waits between reconnection attempts to the same server."""
PING_INTERVAL = 5
MAX_OUTSTANDING_PINGS = 2
"""A link that answers two PINGs in a row (sent every ``ping_interval``: the profile's
``heartbeat_interval``, 5 s by default) is dropped and reconnected: a cut cable is
noticed within about three intervals even when no write is pending."""
RETRY = 10.0
"""Seconds between attempts when nats-py refuses to even try (a file it cannot use)."""
REQUEST_TIMEOUT = 2.0
"""Seconds a JetStream API call (a KV write) may take before it counts as failed."""

_TOKEN_OK = re.compile(r"[A-Za-z0-9-]")


def token(name: str) -> str:
    """``name`` as one NATS subject token and bucket-name part, one-to-one.

    Profile and host names allow ``[A-Za-z0-9_.-]``; a subject token may not hold
    ``.`` and a bucket name only ``[A-Za-z0-9_-]``. Letters, digits and ``-`` stay,
    ``_`` becomes ``__`` and ``.`` becomes ``_d``, so distinct names never collide.
    """
    out = []
    for ch in name:
        if _TOKEN_OK.match(ch):
            out.append(ch)
        elif ch == "_":
            out.append("__")
        elif ch == ".":
            out.append("_d")
        else:
            out.append(f"_x{ord(ch):x}_")
    return "".join(out)


StateListener = Callable[[bool], None]


class LinkClient(Client):
    """A NATS client that drops a broken connection at once rather than closing it
    politely.

    When nats-py gives a connection up (its pings unanswered, a read error) it closes
    the transport and waits for the close before it reconnects or tells anyone. Over
    TLS that close first sends a close_notify and waits for the server's, up to
    asyncio's ``ssl_shutdown_timeout`` (30 s): with a pulled cable the link stayed
    "connected" half a minute after nats-py knew it was dead, and a cut host was not
    noticed within three heartbeats (tests/fleet/test_link.py::test_cut_and_heal_one_host
    over TLS). A plain socket with unsent bytes waits the same way for them to drain.
    The transport is aborted first: nothing more is sent on a link already given up.
    """

    async def _attempt_reconnect(self) -> None:
        writer = getattr(self._transport, "_io_writer", None)
        raw = getattr(writer, "transport", None)
        if raw is not None and not raw.is_closing():
            raw.abort()
        await super()._attempt_reconnect()


class TlsOnlyClient(LinkClient):
    """A NATS client that never logs in over a connection that is not TLS.

    nats-py upgrades to TLS only when the server's INFO says ``tls_required``, even
    for a ``tls://`` URL: a server (or a man in the middle) that does not ask for TLS
    would get the login -- the creds JWT, the nkey's signature -- in clear. Used
    whenever ``[fleet]`` names a ``tls://`` URL or a ``tls_ca``: the CONNECT is
    refused before a byte of it is written (tests/fleet/test_tls_auth.py)."""

    def _connect_command(self) -> bytes:
        if not self._server_info.get("tls_required"):
            where = self._current_server.uri.netloc if self._current_server else "the server"
            raise ConnectionError(
                f"{where} does not speak TLS, and tls:// (or tls_ca) is configured: "
                "not logging in (nothing was sent in clear)"
            )
        return super()._connect_command()


def wants_tls(cfg: FleetSettings) -> bool:
    """Whether the link must be TLS: a ``tls://`` URL or a CA to check the server with."""
    return cfg.tls_ca is not None or any(u.startswith("tls://") for u in cfg.urls)


class FleetLink:
    """The NATS connection of one profile's daemon, and the names of what it keeps there.

    ``connected`` is the link's state now; listeners added with :meth:`on_change`
    are called (on the event loop, synchronously) with ``True`` when the link comes
    up -- the first time and after every reconnection -- and ``False`` when it
    drops. :meth:`run` keeps the link for as long as it runs.
    """

    def __init__(
        self, cfg: FleetSettings, profile: str, ping_interval: float = PING_INTERVAL
    ) -> None:
        self.cfg = cfg
        self.ping_interval = max(1, math.ceil(ping_interval))
        self.profile = profile
        self.host = cfg.name
        self.prefix = f"mesh.{token(profile)}"
        """Every subject of this profile starts with this (``mesh.<profile>``)."""
        self.nc: Client | None = None
        self.js: JetStreamContext | None = None
        self.watch_nc: Client | None = None
        """The connection of the KV watches (see the module docstring)."""
        self.watch_js: JetStreamContext | None = None
        self.connected = False
        """Both connections are up."""
        self._up_now = {"main": False, "watch": False}
        self.last_error: str | None = None
        self.connects = 0
        """How many times the link came up (1 + reconnections)."""
        self._listeners: list[StateListener] = []
        self._kv: dict[str, KeyValue] = {}
        self._watch_kv: dict[str, KeyValue] = {}
        self._up = anyio.Event()
        self._made = anyio.Event()

    # --- names ------------------------------------------------------------------------

    def bucket(self, what: str) -> str:
        """The KV bucket ``what`` of this profile: ``mesh_<profile>_<what>``."""
        return f"mesh_{token(self.profile)}_{what}"

    def stream(self, what: str) -> str:
        """The JetStream stream ``what`` of this profile: ``MESH_<profile>_<what>``."""
        return f"MESH_{token(self.profile)}_{what}"

    def subject(self, *parts: str) -> str:
        """``mesh.<profile>.<part>…``; each part is made one token (see :func:`token`)."""
        return ".".join([self.prefix, *(token(p) for p in parts)])

    @property
    def host_token(self) -> str:
        """This host's name as one subject token / KV key part."""
        return token(self.host)

    # --- state ----------------------------------------------------------------------

    def on_change(self, listener: StateListener) -> Callable[[], None]:
        """Call ``listener(connected)`` at each change of the link; returns the undo."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    async def wait_connected(self) -> None:
        """Return once the link is up (at once if it is)."""
        while not self.connected:
            await self._up.wait()

    def _set(self, up: bool) -> None:
        if up == self.connected:
            return
        self.connected = up
        if up:
            self.connects += 1
            self._up.set()
            log.info("fleet link up: %s (host %s)", self.server_url or "?", self.host)
        else:
            self._up = anyio.Event()
            log.warning("fleet link down: %s", self.last_error or "disconnected")
        for listener in list(self._listeners):
            try:
                listener(up)
            except Exception:
                log.exception("a fleet state listener failed")

    @property
    def server_url(self) -> str | None:
        nc = self.nc
        if nc is None or nc.connected_url is None:
            return None
        u = nc.connected_url
        return f"{u.scheme}://{u.hostname}:{u.port}"

    @property
    def server_version(self) -> str | None:
        nc = self.nc
        if nc is None or not self.connected:
            return None
        v = nc.connected_server_version
        return f"{v.major}.{v.minor}.{v.patch}"

    # --- connection -----------------------------------------------------------------

    def _options(self, which: str) -> dict[str, Any]:
        cfg = self.cfg

        async def disconnected() -> None:
            self._state(which, False)

        async def reconnected() -> None:
            (self._kv if which == "main" else self._watch_kv).clear()  # bind again: the
            self.last_error = None  # server may have lost the buckets
            self._state(which, True)

        suffix = "" if which == "main" else f" ({which})"
        opts: dict[str, Any] = {
            "servers": list(cfg.urls),
            "name": f"meshd {self.profile}@{self.host}{suffix}",
            "connect_timeout": CONNECT_TIMEOUT,
            "allow_reconnect": True,
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": RECONNECT_WAIT,
            "ping_interval": self.ping_interval,
            "max_outstanding_pings": MAX_OUTSTANDING_PINGS,
            "error_cb": self._on_error,
            "disconnected_cb": disconnected,
            "reconnected_cb": reconnected,
            "closed_cb": disconnected,
        }
        if cfg.creds is not None:
            opts["user_credentials"] = cfg.creds
        if cfg.nkey is not None:
            opts["nkeys_seed"] = cfg.nkey
        if wants_tls(cfg):
            opts["tls"] = ssl.create_default_context(cafile=cfg.tls_ca)
        return opts

    async def _on_error(self, exc: Exception) -> None:
        if isinstance(exc, (BrokenPipeError, ConnectionResetError)) and self.last_error:
            return  # the server hung up after saying why (an authorization refusal): keep that
        text = describe(exc)
        if text != self.last_error:
            log.warning(
                "fleet link: %s (%s); local calls are served meanwhile",
                text,
                ", ".join(self.cfg.urls),
            )
        self.last_error = text

    def _state(self, which: str, up: bool) -> None:
        """Connection ``which`` (``main`` or ``watch``) went up or down: the link is up
        while both are."""
        self._up_now[which] = up
        self._set(all(self._up_now.values()))

    async def run(self) -> None:
        """Connect both connections, then keep the link until cancelled.

        nats-py retries every URL for ever (``max_reconnect_attempts=-1``), the first
        connection included, every ``RECONNECT_WAIT`` seconds; each failure lands in
        ``last_error`` (via ``error_cb``) for ``fleet status`` and ``doctor`` to show.
        The connections stay open when this is cancelled: :meth:`close` them once the
        parts that use them are done (``Fleet.run`` does), so their last words (a host
        withdrawing its sessions) still go out.
        """
        nc = await self._connect("main")
        self.nc, self.js = nc, nc.jetstream(timeout=REQUEST_TIMEOUT)
        self._up_now["main"] = nc.is_connected
        wnc = await self._connect("watch")
        self.watch_nc, self.watch_js = wnc, wnc.jetstream(timeout=REQUEST_TIMEOUT)
        self._up_now["watch"] = wnc.is_connected
        self.last_error = None
        self._set(all(self._up_now.values()))
        await anyio.sleep_forever()

    async def _connect(self, which: str) -> Client:
        """One connected client (``main`` or ``watch``); tried again until it connects."""
        while True:
            nc = TlsOnlyClient() if wants_tls(self.cfg) else LinkClient()
            if which == "main":
                self.nc = nc  # fleet status shows what it is trying meanwhile
            try:
                await nc.connect(**self._options(which))
                return nc
            except Exception as exc:  # an unusable seed, CA or creds file: say so, retry
                text = describe(exc)
                if text != self.last_error:
                    log.error("fleet link: cannot connect: %s; retrying every %.0f s", text, RETRY)
                self.last_error = text
                with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                    try:
                        await nc.close()
                    except Exception as close_exc:
                        log.debug("fleet: closing a failed client: %s", describe(close_exc))
                await anyio.sleep(RETRY)

    async def close(self) -> None:
        clients = [self.nc, self.watch_nc]
        self.nc = self.js = self.watch_nc = self.watch_js = None
        self._kv.clear()
        self._watch_kv.clear()
        for nc in clients:
            if nc is None:
                continue
            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                try:
                    await nc.close()
                except Exception as exc:
                    log.debug("fleet: closing the link: %s", describe(exc))
        self._up_now = dict.fromkeys(self._up_now, False)
        self._set(False)

    # --- JetStream ------------------------------------------------------------------

    def jetstream(self) -> JetStreamContext:
        """The JetStream context; raises :class:`FleetDown` while the link is down."""
        if self.js is None or not self.connected:
            raise FleetDown(self.last_error or "the fleet link is down")
        return self.js

    async def kv(self, what: str, **config: Any) -> KeyValue:
        """This profile's KV bucket ``what``, bound (and created with ``config`` if new).

        ``config`` is passed to :class:`nats.js.api.KeyValueConfig` (``history``,
        ``ttl``…); the bucket is file-stored, and per-key TTL is allowed (nats-py
        creates every bucket with ``allow_msg_ttl``; server ≥ 2.11).
        """
        cached = self._kv.get(what)
        if cached is not None:
            return cached
        js = self.jetstream()
        name = self.bucket(what)
        try:
            kv = await js.key_value(name)
        except nats.js.errors.BucketNotFoundError:
            cfg = KeyValueConfig(bucket=name, storage=StorageType.FILE, **config)
            kv = await js.create_key_value(cfg)
            self._rebound()  # whoever watches a bucket follows the new one
        self._kv[what] = kv
        return kv

    def rebound(self) -> anyio.Event:
        """An event set the next time a bucket is made (the first time, or again after
        it was deleted) or :meth:`forget`-ten: a watch of the old one may see nothing
        more, and should start again."""
        return self._made

    def forget(self, what: str) -> None:
        """Bind bucket ``what`` again at its next use (it may have been deleted)."""
        self._kv.pop(what, None)
        self._watch_kv.pop(what, None)
        self._rebound()

    def _rebound(self) -> None:
        self._made.set()
        self._made = anyio.Event()

    async def watch_kv(self, what: str) -> KeyValue:
        """This profile's KV bucket ``what`` bound on the watch connection: what
        ``watch`` is called on. Never creates it (``BucketNotFoundError``): a watcher
        that made a lost bucket again would hide the loss from the part that must see
        it (the claims' reconcile, :meth:`kv`)."""
        cached = self._watch_kv.get(what)
        if cached is not None:
            return cached
        js = self.watch_js
        if js is None or not self.connected:
            raise FleetDown(self.last_error or "the fleet link is down")
        kv = await js.key_value(self.bucket(what))
        self._watch_kv[what] = kv
        return kv


def describe(exc: BaseException) -> str:
    """A short, readable account of a nats-py failure (many have an empty ``str``)."""
    text = str(exc).strip()
    if isinstance(exc, (TimeoutError, nats.errors.TimeoutError)):
        return "timed out"
    if isinstance(exc, nats.errors.NoServersError):
        return "no server answered"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = ["FleetDown", "FleetLink", "describe", "token"]
