"""The :class:`Fleet`: everything this daemon does with the other hosts, behind one object.

Made by :class:`meshd.domains.fleet.FleetDomain` when ``[fleet]`` is configured (and
again after a reload that changes the table); without ``[fleet]`` it does not exist
and nothing here is imported. It is the :class:`~meshd.ports.FleetPort` the domains
see, and it sees this host only through the ports it was given. It owns the
:class:`~meshd.fleet.link.FleetLink` and the fleet *parts* (the registry mirror,
claims, messages), and runs them all in one task group that lives as long as the link.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

import anyio

from meshd.core.clock import Clock
from meshd.core.settings import FleetSettings
from meshd.fleet.link import FleetLink, describe
from meshd.fleet.mail import MailLink
from meshd.keys import Key
from meshd.ports import ClaimTable, Holding, MailDesk, SessionSource
from meshd.protocol import methods as m

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
    """This host's membership of the fleet: the link and the parts that use it.

    Built by :class:`meshd.domains.fleet.FleetDomain` with what it needs of this host,
    through the ports (:mod:`meshd.ports`): the lock table, the live sessions, the
    mail desk. It knows no domain."""

    def __init__(
        self, cfg: FleetSettings, profile: str, clock: Clock, *, interval: Callable[[], float],
        table: ClaimTable, sessions: SessionSource, desk: MailDesk,
        carried: set[tuple[str, str]] | None = None,
    ) -> None:  # fmt: skip
        from meshd.fleet.claims import FleetClaims
        from meshd.fleet.registry import FleetRegistry

        self.cfg = cfg
        self.clock = clock
        self.link = FleetLink(cfg, profile, ping_interval=interval())
        self.changed_mono = clock.monotonic()
        self.link.on_change(self._changed)
        self.registry = FleetRegistry(self.link, clock, sessions, interval=interval)
        self.mail = MailLink(self.link, self.registry, desk)
        """Messages, asks, broadcasts, signals (docs/FLEET.md)."""
        self.claims = FleetClaims(self.link, table, heartbeat=interval(), carried=carried)
        self.parts: list[FleetPart] = [self.registry, self.mail, self.claims]
        """Parts run by :meth:`run`, each beside the link (one line to add one)."""

    @property
    def host(self) -> str:
        """This host's name in the fleet."""
        return self.cfg.name

    def remote_sessions(self, *, fresh: bool = False) -> list[m.SessionInfo]:
        """The other hosts' live sessions, as the registry read them last."""
        return self.registry.remote_sessions(fresh=fresh)

    async def holders(self, keys: Sequence[Key]) -> list[Holding]:
        """Other hosts' claims on these fleet-wide keys, each with its holder's task
        and branch as the registry lists them (SPEC §12, one view)."""
        return self._named(await self.claims.holders(keys))

    async def held(self, session_id: str | None = None) -> list[Holding]:
        """Every claim other hosts hold in the fleet now (of ``session_id`` only), each
        with its holder's task and branch as the registry lists them."""
        return self._named(await self.claims.held(session_id))

    def _named(self, found: list[Holding]) -> list[Holding]:
        """``found`` with each holder's task and branch from the registry."""
        if not found:
            return found
        infos = {i.session_id: i for i in self.registry.remote_sessions()}
        out = []
        for h in found:
            i = infos.get(h.session_id)
            out.append(h if i is None else replace(h, task=i.task, branch=i.branch))
        return out

    def _changed(self, up: bool) -> None:
        self.changed_mono = self.clock.monotonic()

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
            "since_s": round(self.clock.monotonic() - self.changed_mono, 3),
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
