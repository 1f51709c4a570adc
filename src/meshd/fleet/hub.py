"""The :class:`Fleet`: everything this daemon does with the other hosts, behind one object.

Made by :class:`meshd.domains.fleet.FleetDomain` when ``[fleet]`` is configured (and
again after a reload that changes the table); without ``[fleet]`` it does not exist
and nothing here is imported. It owns the :class:`~meshd.fleet.link.FleetLink` and
the fleet *parts* (the registry mirror, claims, messages), and runs them all in one
task group that lives as long as the link.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from meshd.core.settings import FleetSettings
from meshd.fleet.link import FleetLink, describe
from meshd.fleet.mail import MailLink

if TYPE_CHECKING:
    from meshd.service import Service

log = logging.getLogger("meshd.fleet")


class FleetPart(Protocol):
    """One piece of fleet work (registry, claims, messages), run by :class:`Fleet`."""

    name: str

    async def run(self) -> None:
        """Work until cancelled; the link may be down at any moment (wait for it with
        ``link.wait_connected()``, hear of changes with ``link.on_change``)."""
        ...

    def status(self) -> dict[str, Any]:
        """This part's figures for ``fleet status`` (``parts[name]``); a ``local_only``
        list in it is added to the status's ``local_only``."""
        ...


class Fleet:
    """This host's membership of the fleet: the link and the parts that use it."""

    def __init__(self, svc: Service, cfg: FleetSettings) -> None:
        from meshd.fleet.registry import FleetRegistry

        self.svc = svc
        self.cfg = cfg
        self.link = FleetLink(
            cfg, svc.paths.profile, ping_interval=svc.state.settings.heartbeat_interval
        )
        self.changed_mono = svc.clock.monotonic()
        self.link.on_change(self._changed)
        self.registry = FleetRegistry(self)
        self.parts: list[FleetPart] = [self.registry]
        """Parts run by :meth:`run`; items 3 and 4 append theirs here (one line each)."""
        self.mail = MailLink(self)  # messages, asks, broadcasts, signals (docs/FLEET.md)
        self.parts.append(self.mail)
        from meshd.domains.claims import ClaimHandlers
        from meshd.fleet.claims import FleetClaims

        self.claims = FleetClaims(
            self.link, svc.domain(ClaimHandlers), heartbeat=svc.state.settings.heartbeat_interval
        )
        self.parts.append(self.claims)

    @property
    def host(self) -> str:
        """This host's name in the fleet."""
        return self.cfg.name

    def _changed(self, up: bool) -> None:
        self.changed_mono = self.svc.clock.monotonic()

    async def run(self) -> None:
        """The link and every part, until cancelled (a reload, a leave, shutdown); the
        link is closed after the parts finished (their ``finally`` may still write)."""
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.link.run)
                for part in self.parts:
                    tg.start_soon(self._guarded, part)
        finally:
            await self.link.close()

    async def _guarded(self, part: FleetPart) -> None:
        """Run ``part``; a part that fails is logged and started again, never the daemon's end."""
        while True:
            try:
                await part.run()
                return
            except Exception:
                log.exception("fleet %s failed; starting it again in 1 s", part.name)
                await anyio.sleep(1.0)

    async def status(self) -> dict[str, Any]:
        """What ``fleet.status`` shows: the link, the hosts seen, lag, what is local-only."""
        link = self.link
        rtt: float | None = None
        if link.connected and link.nc is not None:
            with anyio.move_on_after(1.0):
                try:
                    rtt = round(await link.nc.rtt() * 1000, 3)
                except Exception as exc:
                    log.debug("fleet: rtt: %s", describe(exc))
        parts = {p.name: p.status() for p in self.parts}
        local_only = [x for p in parts.values() for x in p.pop("local_only", [])]
        reg = parts["registry"]
        return {
            "configured": True,
            "connected": link.connected,
            "host": self.host,
            "urls": list(self.cfg.urls),
            "server": link.server_url if link.connected else None,
            "server_version": link.server_version,
            "rtt_ms": rtt,
            "last_error": link.last_error,
            "since_s": round(self.svc.clock.monotonic() - self.changed_mono, 3),
            "connects": link.connects,
            "hosts": reg.pop("hosts"),
            "published_s": reg.pop("published_s"),
            "shared_kinds": list(self.cfg.shared_kinds),
            "shared_paths": list(self.cfg.shared_paths),
            "on_partition": self.cfg.on_partition,
            "local_only": local_only,
            "parts": parts,
        }


__all__ = ["Fleet", "FleetPart"]
