"""Where the domains and the fleet meet: the Protocols each side offers the other.

The role anyio's ``abc`` plays for its backends. :mod:`meshd.fleet` is a backend
beneath claims, messages and the registry: it imports the protocol, core records and
this module, never a domain; the domains reach the fleet only through what is named
here. :mod:`meshd.app` is the one place that builds both sides and hands each its
collaborators.

Two directions:

* what a domain asks of the fleet -- :class:`FleetAccess` (the fleet, or None when
  this host is alone), :class:`FleetPort` (who holds these fleet-wide keys, which
  host a session lives on), :class:`FleetClaimsPort` (take, wait for, give back
  and check fleet-wide claims), :class:`MailTransport` (deliver to a session
  elsewhere, publish to every host);
* what the fleet asks of this host -- :class:`ClaimTable` (this host's lock
  table), :class:`SessionSource` (this host's live sessions as listings show them),
  :class:`MailDesk` (take in what arrives, serve asks and collects).

This module imports only types: ``import meshd.ports`` loads nothing of the fleet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from meshd.keys import Key
from meshd.protocol.claims import Mode

if TYPE_CHECKING:
    import anyio

    from meshd.core.mail.fleet_post import FleetPost
    from meshd.fleet.claim_grants import FleetGrant, FleetHeld, FleetWaiter
    from meshd.protocol import fleet_mail as wire
    from meshd.protocol import methods as m


class FleetDown(Exception):
    """The fleet cannot be reached now (the link is down or a request timed out).

    Here, not in :mod:`meshd.fleet.link`, so a domain can catch it without importing
    nats-py: under ``on_partition = "fail"`` a fleet-wide request answers UNAVAILABLE,
    under ``"local"`` it is granted here alone."""


@dataclass(frozen=True, slots=True)
class Holding:
    """A fleet-wide claim another host holds, as the fleet's bucket says now."""

    session_id: str
    resource: str
    mode: Mode
    host: str
    token: int = 0
    task: str = ""
    branch: str | None = None
    since: float = 0.0
    """Wall time the fleet granted it (0: not known)."""
    reason: str = ""
    """What it was claimed for, as its commit record says ("" from a host that does
    not write one)."""


# --- what the fleet asks of this host -------------------------------------------------


class ClaimTable(Protocol):
    """This host's lock table, as the fleet's claims need it (the claims domain)."""

    def fleet_claims(self) -> list[tuple[str, Key, Mode, int]]:
        """This host's live claims on fleet-wide keys: (session, key, mode, token)."""
        ...

    def fleet_lost(self, session_id: str, resources: list[str], token: int, how: str) -> None:
        """The fleet took these claims from ``session_id`` (stolen, lease lost, conflict)."""
        ...

    def related(self, a: str, b: str) -> bool:
        """Same session, or one descends from the other (this host's sessions)."""
        ...

    def fleet_healed(self, session_id: str, keys: list[Key], old: int, new: int) -> None:
        """A local-only set is fleet-wide now, under the fleet's token ``new``."""
        ...

    def restored_local_only(self) -> set[tuple[str, str]]:
        """The (session, resource) pairs restored at the start that were local-only when
        meshd stopped: marked so again, healed at the first link-up (once)."""
        ...


class SessionSource(Protocol):
    """This host's live sessions, as ``session.list`` shows them (the sessions domain)."""

    def listed(self) -> list[m.SessionInfo]:
        """Every live session of this host, with at most ``LISTED_CLAIMS`` claims each."""
        ...


class MailDesk(Protocol):
    """What the fleet's mail link needs of this host's mail (the fleet mail domain)."""

    post: FleetPost

    async def take(self, key: str, item: wire.MailItem) -> bool:
        """Take in one item unless its key was seen; False: a copy, dropped."""
        ...

    async def serve_ask(self, raw: bytes) -> bytes:
        """Answer an ask from another host (errors go in the reply)."""
        ...

    async def serve_collect(self, raw: bytes) -> bytes | None:
        """This host's part of another host's collected broadcast."""
        ...

    def answers_at_once(self, raw: bytes) -> bool:
        """Whether an ask is answered without waiting (served inline)."""
        ...

    def sent(self) -> None:
        """Outbox rows went out: store that they did."""
        ...


# --- what a domain asks of the fleet --------------------------------------------------


class MailTransport(Protocol):
    """Deliver to a session elsewhere, publish to every host (the fleet's mail link)."""

    host: str

    def host_of(self, sid: str) -> str | None: ...

    def mail_subject(self, host: str | None) -> str: ...

    def kick(self) -> None: ...

    async def request(self, host: str, payload: bytes, timeout: float) -> bytes: ...

    async def gather(self, payload: bytes, timeout: float) -> list[bytes]: ...

    def other_sessions(self) -> list[m.SessionInfo]:
        """The live sessions of every other host, as the registry knows them now."""
        ...


class FleetClaimsPort(Protocol):
    """Fleet-wide claims, decided in the fleet's bucket (``meshd.fleet.claims``)."""

    local_only: set[tuple[str, str]]
    by_claim: dict[tuple[str, str], str]

    @property
    def ready(self) -> bool:
        """Whether the fleet decides claims now (link up, reconciled, local-only healed)."""
        ...

    @property
    def on_partition(self) -> str: ...

    @property
    def renew_every(self) -> float: ...

    def is_fleet(self, key: Key) -> bool: ...

    def split(self, keys: Sequence[Key]) -> tuple[list[Key], list[Key]]: ...

    async def acquire(
        self, session_id: str, keys: Sequence[Key], mode: Mode, *,
        waiter: FleetWaiter | None = None, steal: bool = False, reason: str = "",
    ) -> FleetGrant | FleetHeld: ...  # fmt: skip

    async def enqueue(self, session_id: str, keys: Sequence[Key], mode: Mode) -> FleetWaiter: ...

    async def dequeue(self, waiter: FleetWaiter) -> None: ...

    def arm(self, keys: Sequence[Key]) -> list[anyio.Event]: ...

    async def changed(self, events: list[anyio.Event], timeout: float) -> None: ...

    async def back(self, timeout: float) -> None: ...

    async def release(self, session_id: str, claims: Sequence[tuple[str, int]]) -> None: ...

    def release_soon(self, session_id: str, claims: Sequence[tuple[str, int]]) -> None: ...

    def granted_alone(self, session_id: str, keys: Sequence[Key]) -> None:
        """These keys were granted here alone (local-only): reconciled once the fleet is back."""
        ...

    def paused(self, session_id: str) -> None: ...

    def waiting(self) -> list[FleetWaiter]: ...

    async def validate(self, key: Key, token: int) -> tuple[bool, str | None, str | None]: ...

    async def holders(self, keys: Sequence[Key]) -> list[Holding]:
        """Other hosts' claims overlapping ``keys`` (fleet-wide ones), read now;
        raises FleetDown when the fleet cannot say."""
        ...

    async def held(self, session_id: str | None = None) -> list[Holding]:
        """Every claim other hosts hold in the fleet now (of ``session_id`` only, if
        given), read now; raises FleetDown when the fleet cannot say."""
        ...


class FleetPort(Protocol):
    """This host's membership of the fleet, as the domains see it (``meshd.fleet.hub``)."""

    @property
    def host(self) -> str: ...

    @property
    def claims(self) -> FleetClaimsPort: ...

    @property
    def mail(self) -> MailTransport: ...

    def remote_sessions(self, *, fresh: bool = False) -> list[m.SessionInfo]: ...

    async def holders(self, keys: Sequence[Key]) -> list[Holding]:
        """:meth:`FleetClaimsPort.holders`, with each holder's task from the registry."""
        ...

    async def held(self, session_id: str | None = None) -> list[Holding]:
        """:meth:`FleetClaimsPort.held`, with each holder's task from the registry."""
        ...

    async def status(self) -> dict[str, Any]: ...


class FleetAccess(Protocol):
    """The fleet while ``[fleet]`` is configured and running; None: this host is alone.

    Never cache :attr:`fleet`: a reload (``fleet join``/``leave``) replaces it."""

    @property
    def fleet(self) -> FleetPort | None: ...


__all__ = [
    "ClaimTable",
    "FleetAccess",
    "FleetClaimsPort",
    "FleetDown",
    "FleetPort",
    "Holding",
    "MailDesk",
    "MailTransport",
    "SessionSource",
]
