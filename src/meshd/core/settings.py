"""The effective settings of one profile, as the core sees them.

Plain and immutable; :mod:`meshd.config` builds it from ``config.toml`` and a
reload swaps the whole object.
"""

from __future__ import annotations

import msgspec

from meshd.core.work.jobs import JobSpec

DEFAULT_SHARED_KINDS = ("box", "account", "cron", "gateway", "res")


class FleetSettings(msgspec.Struct, frozen=True):
    """The ``[fleet]`` table (SPEC §12): how this host joins the others through NATS.

    Plain data: :mod:`meshd.config` validates it, :mod:`meshd.fleet` connects with it.
    """

    urls: tuple[str, ...]
    name: str
    """This host's name in the fleet (default: the hostname)."""
    creds: str | None = None
    nkey: str | None = None
    tls_ca: str | None = None
    shared_kinds: tuple[str, ...] = DEFAULT_SHARED_KINDS
    shared_paths: tuple[str, ...] = ()
    """Absolute, canonical folders every host sees: ``file:`` keys under them are fleet-wide."""
    on_partition: str = "fail"
    """``"fail"``: a fleet-wide claim is refused (UNAVAILABLE) while the fleet is out of
    reach; ``"local"``: it is granted on this host alone, marked ``local-only``."""


class Settings(msgspec.Struct, frozen=True):
    """SPEC §2 keys, with their defaults."""

    enabled: bool = True
    heartbeat_interval: float = 5.0
    stale_after: float = 20.0
    expire_after: float = 600.0
    visible_to_profiles: tuple[str, ...] = ()
    accept_queries: bool = True
    accept_messages: bool = True
    message_budget_per_minute: int = 30
    max_reply_depth: int = 8
    max_query_timeout: float = 60.0
    preempt_grace: float = 300.0  # how long a preempted holder has to pause (SPEC §5b)
    max_body_bytes: int = 8192
    snapshot_interval: float = 2.0
    history_days: float = 30.0
    jobs: tuple[JobSpec, ...] = ()  # the [jobs.NAME] tables (SPEC §7)
    fleet: FleetSettings | None = None
    """The ``[fleet]`` table (SPEC §12); None: this host is alone, nothing changes."""
    # Connection limits (docs/SECURITY.md), beyond SPEC §2's table:
    max_connections: int = 4096
    """Open connections per uid; more are refused with UNAVAILABLE."""
    idle_timeout: float = 300.0
    """A connection with no bound session, no subscription and nothing running is
    closed after this many seconds without a request."""

    def visible_to(self, profile: str) -> bool:
        """Whether ``profile`` sees this one's sessions in ``--all-profiles`` listings."""
        return "*" in self.visible_to_profiles or profile in self.visible_to_profiles
