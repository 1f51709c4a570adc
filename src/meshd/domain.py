"""The one shape every domain of the daemon has (sessions, claims, messages, board …).

A domain is a class in ``meshd/domains/<name>.py`` deriving from :class:`Domain`.
``app.wire`` makes one of each, with the collaborators it uses, in the order their
methods appear in the schema; :class:`~meshd.service.Service` drives them all
through these hooks (its :class:`~meshd.service.Hooks`), so adding a domain adds
files and one line in ``app.py``, never a callback on the service. Every hook but
:meth:`Domain.install` is optional (the defaults do nothing):

* :meth:`install` -- add the domain's methods with ``self.svc.add(spec, fn)``.
* :meth:`restore` -- take back what the store holds, once, before anything is served.
* :meth:`drain` -- the domain's outbox: writes to commit and events to push, taken
  after each call (only for state the domain keeps itself; the registry, the claim
  table and the mailbox drain through :meth:`meshd.core.state.MeshState.drain`).
* :meth:`sweep` -- periodic work, every sweeper tick (0.25 s).
* :meth:`prune` -- forget history older than ``history_days`` (hourly).
* :meth:`connection_closed` -- a client connection went away.
* :meth:`resolve` -- queued requests the last commit granted or withdrew (claims).
* :meth:`committed` -- what was just stored and published (the ``mesh.watch`` feed).
* :meth:`run` -- long-running work of the domain's own (the fleet link), from serving
  to shutdown.

Modelled on redis's one-file-per-type behind a static command table: the
service knows the hooks, never the domains.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from meshd.core.state import Event, Outcome, Write
    from meshd.service import Conn, Service


NOTHING: tuple[list[Write], list[Event]] = ([], [])
"""What :meth:`Domain.drain` returns when there is nothing to take: one pair for all,
so never add to its lists (the service only reads them). Every durable request
drains every domain once or twice, and nearly always finds nothing: two fresh lists
per domain each time were a tenth of a register's own cost."""


class Domain:
    """Base of every domain: ``self.svc`` is the service; override the hooks you need."""

    name: ClassVar[str] = ""
    """Short name (``"claims"``), for logs."""

    def __init__(self, svc: Service) -> None:
        self.svc = svc

    def install(self) -> None:
        """Add this domain's methods: ``self.svc.add(spec, self.method, is_async=…)``."""
        raise NotImplementedError

    def restore(self, db: sqlite3.Connection) -> None:
        """Take back the domain's durable state from the store (blocking, at start-up,
        in a worker thread, before anything is served; domains restore in order)."""

    def drain(self) -> tuple[list[Write], list[Event]]:
        """The writes and events this domain's own state produced since the last drain.

        Called after every handler and every sweep; what it returns is committed
        with the rest and published once committed. Override only if the domain
        keeps state of its own (the service skips domains that do not). Return
        :data:`NOTHING` when there is nothing.
        """
        return NOTHING

    def sweep(self) -> None:
        """Periodic work, every sweeper tick; leave writes and events for :meth:`drain`."""

    def prune(self, history_days: float) -> None:
        """Forget stored history older than ``history_days`` (called hourly)."""

    def connection_closed(self, conn: Conn) -> None:
        """A client connection closed: drop what it held (responders, waits)."""

    def resolve(self, outcomes: list[Outcome], error: BaseException | None) -> None:
        """Queued requests the last commit settled (``error``: the commit failed)."""

    def committed(self, writes: list[Write], events: list[Event]) -> None:
        """What was just committed (and published): only changes that are durable now."""

    async def run(self) -> None:
        """Work of the domain's own that lasts as long as the daemon serves (the fleet
        link): started in the daemon's task group once the socket is served, cancelled
        at shutdown. A domain without such work does not override it (nothing is started)."""

    def forget(self, refused: list[Write]) -> None:
        """A foreground commit of ``refused`` failed (its caller is told UNAVAILABLE):
        forget what those writes created in this domain's memory."""

    def overrides(self, hook: str) -> bool:
        """Whether this domain implements ``hook`` itself (the service calls only those)."""
        return getattr(type(self), hook) is not getattr(Domain, hook)
