"""The other hosts' sessions, as this host last read them from the fleet (pure, no I/O).

Each host writes one entry -- its live sessions -- to the profile's ``sessions``
bucket with a per-key TTL of three of its heartbeat intervals, and rewrites it when
its sessions change and at least once an interval (:mod:`meshd.fleet.registry`).
A reader sees an entry's *revision* change at every rewrite; this model notes
when (on this host's monotonic clock, so no two hosts' wall clocks are compared):

* an entry whose revision has not changed for ``STALE_INTERVALS`` of its
  host's intervals means the host stopped writing: its sessions are shown
  **stale** (their host may be gone, or cut off);
* an entry the server no longer has (its TTL ran out, or the host left cleanly)
  is dropped; so is one not refreshed for ``DROP_INTERVALS`` intervals, which is
  what happens while *this* host cannot read the bucket at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from meshd.core.clock import Clock
from meshd.protocol import methods as m

STALE_INTERVALS = 2.0
"""A host that has not rewritten its entry for this many of its intervals is stale."""
TTL_INTERVALS = 3.0
"""The per-key TTL of a host's entry, in its heartbeat intervals (SPEC §12: about three)."""
DROP_INTERVALS = 4.0
"""Dropped without a word from the server after this many intervals (the TTL plus one)."""


class HostEntry(msgspec.Struct, kw_only=True):
    """What one host writes under its key: who it is and its live sessions."""

    host: str
    instance: str
    """A random id per daemon start: two daemons writing one key under one name show."""
    version: str
    interval: float
    """How often this host rewrites its entry (its ``heartbeat_interval``)."""
    sessions: list[m.SessionInfo] = []


@dataclass
class Seen:
    """One other host's entry, and when this host saw it change."""

    entry: HostEntry
    revision: int
    changed_mono: float


class FleetHosts:
    """The other hosts' entries, their freshness, and their sessions as listings show them."""

    def __init__(self, clock: Clock, host: str) -> None:
        self.clock = clock
        self.host = host
        self.hosts: dict[str, Seen] = {}
        self.clashes: set[str] = set()
        """Instances of other daemons seen writing under this host's own name."""

    def seen(self, entry: HostEntry, revision: int, instance: str) -> None:
        """The bucket holds ``entry`` at ``revision`` (re-reading an unchanged one is fine)."""
        if entry.host == self.host:
            if entry.instance != instance:
                self.clashes.add(entry.instance)
            return
        old = self.hosts.get(entry.host)
        if old is not None and old.revision == revision:
            return
        self.hosts[entry.host] = Seen(entry, revision, self.clock.monotonic())

    def present(self, hosts: set[str]) -> None:
        """A complete read of the bucket found exactly ``hosts``: forget the others."""
        for name in [h for h in self.hosts if h not in hosts]:
            del self.hosts[name]

    def expire(self) -> None:
        """Drop entries unchanged for ``DROP_INTERVALS`` (the bucket could not say)."""
        now = self.clock.monotonic()
        for name, s in list(self.hosts.items()):
            if now - s.changed_mono > DROP_INTERVALS * s.entry.interval:
                del self.hosts[name]

    def lag(self, s: Seen) -> float:
        return max(0.0, self.clock.monotonic() - s.changed_mono)

    def is_stale(self, s: Seen) -> bool:
        return self.lag(s) > STALE_INTERVALS * s.entry.interval

    def sessions(self, *, fresh: bool = False) -> list[m.SessionInfo]:
        """Every other host's sessions, their age counted on from when they were read;
        all of a stale host's sessions are stale (``fresh``: left out)."""
        self.expire()
        out: list[m.SessionInfo] = []
        for s in self.hosts.values():
            lag, host_stale = self.lag(s), self.is_stale(s)
            for info in s.entry.sessions:
                stale = info.stale or host_stale
                if fresh and stale:
                    continue
                out.append(
                    msgspec.structs.replace(
                        info,
                        host=s.entry.host,
                        stale=stale,
                        age_s=round(info.age_s + lag, 3),
                        idle_s=round(info.idle_s + lag, 3),
                    )
                )
        return out

    def host_of(self, session_id: str) -> str | None:
        """Which other host lists ``session_id`` now (None: none does)."""
        for s in self.hosts.values():
            if any(i.session_id == session_id for i in s.entry.sessions):
                return s.entry.host
        return None


__all__ = ["DROP_INTERVALS", "STALE_INTERVALS", "TTL_INTERVALS", "FleetHosts", "HostEntry"]
