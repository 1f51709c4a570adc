"""The registry across hosts (SPEC §12): this host's live sessions mirrored into the
profile's ``sessions`` KV bucket, and every other host's read back.

One key per host (its name), holding all of its live sessions: a registration, an
end or a status change rewrites it within ``PUBLISH_TICK``, and a host that changed
nothing rewrites it once a ``heartbeat_interval`` -- one write per host and
interval however many sessions it has, never one per heartbeat. Every write
carries a per-key TTL of :data:`~meshd.fleet.hosts.TTL_INTERVALS` intervals
(JetStream's ``Nats-TTL``, server ≥ 2.11), so a host that vanishes is removed by
the server itself; readers show its sessions stale first (:mod:`meshd.fleet.hosts`).

The other hosts' entries are read with a complete scan of the bucket every half
interval: a handful of hosts, each one value, and nothing to resynchronise after
a reconnection. While the link is down the local mesh works as ever; when it comes
back this host writes its entry at once.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Callable
from typing import Any

import anyio
import msgspec
import nats.js.errors

from meshd import __version__
from meshd.core.clock import Clock
from meshd.fleet.hosts import TTL_INTERVALS, FleetHosts, HostEntry
from meshd.fleet.link import REQUEST_TIMEOUT, FleetDown, FleetLink, describe
from meshd.ports import SessionSource
from meshd.protocol import methods as m

log = logging.getLogger("meshd.fleet")

BUCKET = "sessions"
PUBLISH_TICK = 1.0
"""Seconds between two looks at whether this host's sessions changed."""
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(HostEntry).decode


class FleetRegistry:
    """Mirror of this host's sessions in the fleet, and the other hosts' sessions."""

    name = "registry"

    def __init__(
        self, link: FleetLink, clock: Clock, sessions: SessionSource, *,
        interval: Callable[[], float],
    ) -> None:  # fmt: skip
        self.link = link
        self.clock = clock
        self.host = link.cfg.name
        self._sessions = sessions
        self._interval = interval
        self.hosts = FleetHosts(clock, self.host)
        self.instance = secrets.token_hex(8)
        self.published_mono: float | None = None
        self.read_mono: float | None = None
        self.last_error: str | None = None
        self._sent: bytes | None = None
        self._kick: anyio.Event | None = None

    # --- what this host writes ----------------------------------------------------------

    @property
    def interval(self) -> float:
        """The heartbeat interval now (a reload may change it)."""
        return self._interval()

    @property
    def ttl(self) -> int:
        """Seconds the server keeps an entry that is not rewritten (whole seconds, ≥ 1)."""
        return max(1, math.ceil(TTL_INTERVALS * self.interval))

    def local(self) -> list[m.SessionInfo]:
        """This host's live sessions as listings show them, named by the fleet name."""
        host = self.host
        return [msgspec.structs.replace(i, host=host) for i in self._sessions.listed()]

    def entry(self) -> tuple[bytes, bytes]:
        """This host's entry, and what of it counts as a change (not ages nor heartbeats)."""
        sessions = self.local()
        steady = [
            msgspec.structs.replace(i, age_s=0.0, idle_s=0.0, last_heartbeat="") for i in sessions
        ]
        e = HostEntry(
            host=self.host, instance=self.instance, version=__version__,
            interval=self.interval, sessions=sessions,
        )  # fmt: skip
        return _encode(e), _encode(steady)

    async def publish(self, *, force: bool = False) -> bool:
        """Write this host's entry if it changed or is due; whether it wrote."""
        data, steady = self.entry()
        now = self.clock.monotonic()
        due = self.published_mono is None or now - self.published_mono >= self.interval
        if not (force or due or steady != self._sent):
            return False
        js = self.link.jetstream()
        await self.link.kv(BUCKET, history=1)  # created if new
        # KeyValue.put takes no TTL: publish to the key's subject with Nats-TTL
        subject = f"$KV.{self.link.bucket(BUCKET)}.{self.link.host_token}"
        await js.publish(subject, data, msg_ttl=self.ttl)
        self._sent, self.published_mono = steady, now
        return True

    async def withdraw(self) -> None:
        """Remove this host's entry at once (a clean stop or ``fleet leave``)."""
        if not self.link.connected:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(REQUEST_TIMEOUT):
            try:
                kv = await self.link.kv(BUCKET, history=1)
                await kv.purge(self.link.host_token, msg_ttl=self.ttl)
            except Exception as exc:
                log.debug("fleet: could not withdraw this host's sessions: %s", describe(exc))

    # --- what this host reads -------------------------------------------------------------

    async def read(self) -> None:
        """Read every host's entry (one scan of the bucket)."""
        kv = await self.link.kv(BUCKET, history=1)
        names: set[str] = set()
        with anyio.fail_after(REQUEST_TIMEOUT * 2):
            watcher = await kv.watchall(ignore_deletes=True)
            try:
                async for e in watcher:
                    if e is None:  # the end of what is there now
                        break
                    if e.value is None or e.revision is None:
                        continue
                    try:
                        entry = _decode(e.value)
                    except msgspec.DecodeError as exc:
                        log.warning("fleet: unreadable registry entry %r: %s", e.key, exc)
                        continue
                    self.hosts.seen(entry, e.revision, self.instance)
                    names.add(entry.host)
            finally:
                with anyio.CancelScope(shield=True):
                    await watcher.stop()  # type: ignore[no-untyped-call]
        self.hosts.present(names)
        self.read_mono = self.clock.monotonic()

    def remote_sessions(self, *, fresh: bool = False) -> list[m.SessionInfo]:
        """The other hosts' sessions, for ``session.list``."""
        return self.hosts.sessions(fresh=fresh)

    def host_of(self, session_id: str) -> str | None:
        """Which other host lists ``session_id`` (None: none does)."""
        return self.hosts.host_of(session_id)

    # --- the loops ------------------------------------------------------------------------

    def _changed(self, up: bool) -> None:
        if up and self._kick is not None:
            self._kick.set()  # write at once after a (re)connection

    async def run(self) -> None:
        undo = self.link.on_change(self._changed)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._publisher)
                tg.start_soon(self._reader)
        finally:
            undo()
            await self.withdraw()

    async def _publisher(self) -> None:
        while True:
            self._kick = anyio.Event()
            if self.link.connected:
                try:
                    await self.publish()
                    self.last_error = None
                except (FleetDown, TimeoutError, nats.errors.Error, OSError) as exc:
                    self._note(exc)
            with anyio.move_on_after(min(PUBLISH_TICK, self.interval / 2)):
                await self._kick.wait()
                self._sent = None  # reconnected: write now

    async def _reader(self) -> None:
        while True:
            if self.link.connected:
                try:
                    await self.read()
                except (FleetDown, TimeoutError, nats.errors.Error, OSError) as exc:
                    self._note(exc)
            self.hosts.expire()
            await anyio.sleep(self.interval / 2)

    def _note(self, exc: BaseException) -> None:
        text = describe(exc)
        if text != self.last_error:
            log.warning("fleet registry: %s", text)
        self.last_error = text

    def status(self) -> dict[str, Any]:
        now = self.clock.monotonic()
        h = self.hosts
        return {
            "hosts": [
                {
                    "host": s.entry.host,
                    "sessions": len(s.entry.sessions),
                    "lag_s": round(h.lag(s), 3),
                    "stale": h.is_stale(s),
                    "version": s.entry.version,
                }
                for s in sorted(h.hosts.values(), key=lambda s: s.entry.host)
            ],
            "published_s": None
            if self.published_mono is None
            else round(now - self.published_mono, 3),
            "read_s": None if self.read_mono is None else round(now - self.read_mono, 3),
            "ttl_s": self.ttl,
            "last_error": self.last_error,
            "name_clash": bool(h.clashes),
        }


__all__ = ["BUCKET", "FleetRegistry"]
