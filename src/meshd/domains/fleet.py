"""``fleet.*``, and the one place the daemon holds its :class:`~meshd.fleet.hub.Fleet`.

Without ``[fleet]`` this domain is a method that answers ``configured: false`` and a
task that sleeps: nothing of :mod:`meshd.fleet` (nor nats-py) is imported, and no
single-host code path changes. With it, :meth:`FleetDomain.run` makes the
:class:`~meshd.fleet.hub.Fleet` and runs it; a reload that changes the table (``meshctl
fleet join``/``leave``) stops it and makes a new one.

It is the :class:`~meshd.ports.FleetAccess` the other domains are given by ``app.wire``:
its ``fleet`` (a :class:`~meshd.ports.FleetPort`) is ``None`` while this host is alone.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING

import anyio
import msgspec

from meshd.core.settings import FleetSettings
from meshd.domain import Domain
from meshd.ports import ClaimTable, MailDesk, SessionSource
from meshd.protocol import fleet as f
from meshd.protocol.methods import Empty
from meshd.service import Conn, Service
from meshd.store.sessions import load_meta

if TYPE_CHECKING:
    from meshd.fleet.hub import Fleet

log = logging.getLogger("meshd.fleet")
MEMBER_KEY = "fleet.member"
"""``meta`` key: the host name of the fleet this daemon last ran, ``""`` when it last
ran alone (absent in a database older than it: taken as a fleet's)."""
RETRY = 10.0
"""Seconds before a fleet that failed is started again (sooner if the table changes)."""


class FleetDomain(Domain):
    name = "fleet"

    def __init__(self, svc: Service) -> None:
        super().__init__(svc)
        self._fleet: Fleet | None = None
        """The running fleet, until it has stopped (see :attr:`fleet`)."""
        self._ports: tuple[ClaimTable, SessionSource, MailDesk] | None = None
        self._cfg: FleetSettings | None = None
        self._changed: anyio.Event | None = None
        self._carried: set[tuple[str, str]] | None = None
        """The (session, resource) pairs the previous fleet of this process held in the
        fleet, handed to the next one: its reconcile adopts those and offers every other
        claim of the table on a fleet-wide key to the fleet (claims taken before a
        ``fleet join``, or on keys a changed table made fleet-wide). At a start, the
        empty set when the daemon's last run was alone (a join written while it was
        stopped: the claims restored are offered too), else None: the claims restored
        are a restart's, reconciled as such (docs/FLEET.md)."""
        self._member: str | None = None
        """What :data:`MEMBER_KEY` holds (as restored, or as written since)."""
        self.failure: str | None = None
        """Why the fleet stopped (a bug in it), until it runs again."""

    @property
    def fleet(self) -> Fleet | None:
        """The running fleet; None while this host is alone, and from the reload that
        removed ``[fleet]`` on: the old fleet stops only at the next tick (:meth:`sweep`)
        and its link closes after that, but once ``fleet leave`` has its reply every
        read and claim is this host's alone. (A table changed to another fleet keeps
        the old one answering until the new one runs: never a moment with none.)"""
        if self.svc.state.settings.fleet is None:
            return None
        return self._fleet

    def connect(self, *, table: ClaimTable, sessions: SessionSource, desk: MailDesk) -> None:
        """What the fleet gets of this host (``app.wire``): the lock table, the live
        sessions, the mail desk -- through the ports, never the domains themselves."""
        self._ports = (table, sessions, desk)

    def install(self) -> None:
        self.svc.add(f.FLEET_STATUS, self.status, is_async=True)

    def restore(self, db: sqlite3.Connection) -> None:
        self._member = load_meta(db, MEMBER_KEY)
        if self._member == "":
            self._carried = set()

    def _ran(self, member: str) -> None:
        """Remember whether this run is alone (``""``) or a fleet's host, for the next start."""
        if member != self._member:
            self._member = member
            self.svc.state.writes.append(("meta.set", MEMBER_KEY, member))
            self.svc.flush_background()

    def sweep(self) -> None:
        """Notice a reload that changed ``[fleet]`` (one comparison a tick)."""
        if self.svc.state.settings.fleet != self._cfg and self._changed is not None:
            self._changed.set()

    async def run(self) -> None:
        """Keep a :class:`Fleet` for the configured ``[fleet]`` table, for the daemon's life."""
        while True:
            self._changed = anyio.Event()
            cfg = self._cfg = self.svc.state.settings.fleet
            if cfg is None:
                self._carried = set()  # alone: whatever is claimed now is this host's only
                self._ran("")
                await self._changed.wait()
                continue
            try:
                await self._run(cfg)
            except Exception as exc:  # a bug in the fleet must never stop the daemon
                self._failed(exc)
                with anyio.move_on_after(RETRY):
                    await self._changed.wait()

    def _failed(self, exc: Exception) -> None:
        """Keep and log why the fleet stopped. The extra not installed is said in one
        line naming the command that adds it (once, not at every retry); anything else
        is a bug, logged with its traceback."""
        from meshd.fleet import extra

        module = extra.missing_module(exc)
        if module is None:
            self.failure = f"{type(exc).__name__}: {exc}"
            log.exception("the fleet failed; this host works alone, trying again in 10 s")
            return
        said = self.failure
        self.failure = extra.not_installed(module)
        if self.failure != said:
            log.error("%s; this host works alone meanwhile", self.failure)

    async def _run(self, cfg: FleetSettings) -> None:
        from meshd.fleet.hub import Fleet

        assert self._changed is not None
        assert self._ports is not None, "app.wire connects the fleet domain"
        table, sessions, desk = self._ports
        settings = self.svc.state
        fleet = Fleet(
            cfg, self.svc.paths.profile, self.svc.clock,
            interval=lambda: settings.settings.heartbeat_interval,
            table=table, sessions=sessions, desk=desk, carried=self._carried,
        )  # fmt: skip
        self._fleet = fleet
        self._ran(cfg.name)
        self.failure = None
        log.info("joining the fleet at %s as host %s", ", ".join(cfg.urls), cfg.name)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(fleet.run)
                await self._changed.wait()
                tg.cancel_scope.cancel()
        finally:
            self._fleet = None
            self._carried = set(fleet.claims.by_claim)
        log.info("left the fleet (the [fleet] table changed)")

    async def status(self, p: Empty, conn: Conn) -> f.FleetStatusResult:
        fleet = self.fleet
        if fleet is None:
            cfg = self.svc.state.settings.fleet
            if cfg is None:
                return f.FleetStatusResult(configured=False)
            return f.FleetStatusResult(
                configured=True, host=cfg.name, urls=list(cfg.urls), last_error=self.failure
            )
        return msgspec.convert(await fleet.status(), f.FleetStatusResult)
