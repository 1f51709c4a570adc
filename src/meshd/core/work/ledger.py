"""The ledger of external side effects, at most once (SPEC §7 ``once``). Pure.

A key is *free* (no entry), ``running`` (reserved by a live session that is
doing the side effect now), ``done`` (it happened) or ``unknown`` (its runner
went away before saying how it ended: the side effect may or may not have
happened, so nobody runs it again until a person resolves it).

* :meth:`Ledger.reserve` is the only way from free to ``running``; it is atomic
  because the daemon runs one command at a time and the reservation is in
  memory before the reply (and stored, synced, before the reply goes out).
  Anyone else is told the entry as it is (``running``/``done``/``unknown``, who,
  when) and must not run.
* :meth:`Ledger.finish` by the runner: ``done`` on success, ``free`` on a
  failure that is known not to have done the side effect.
* A ``running`` entry whose session is gone -- ended, expired, its process
  killed -- turns ``unknown`` (:meth:`Ledger.sweep`, and before any answer
  about the key). The ledger never guesses in the runner's favour.
* :meth:`Ledger.resolve` (a person: ``once --resolve K done|free``) settles an
  ``unknown`` (or ``done``) key. A ``running`` key of a live session is refused:
  freeing it would let a second runner start beside the first.
* ``ttl``: a ``done`` entry is forgotten ``ttl`` seconds after it was recorded,
  so the key may run again (``--ttl 3600``: at most once an hour). Without it a
  ``done`` entry stays until resolved.

Writes: ``("ledger.put", entry)`` and ``("ledger.delete", key)``; the store
syncs them to disk (SPEC §8) before anyone is told.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

import msgspec
from msgspec.structs import replace

from meshd.core.clock import Clock

Write = tuple[Any, ...]
State = Literal["running", "done", "unknown"]
Live = Callable[[str], bool]


class LedgerRefused(Exception):
    """A resolve that would break at-most-once (the key is running, its runner alive)."""


class Entry(msgspec.Struct, frozen=True):
    """A key that is not free."""

    key: str
    state: State
    session_id: str
    reserved_at: float
    updated_at: float
    ttl: float | None = None
    expires_at: float | None = None
    note: str = ""
    resolved_by: str | None = None


class Reservation(msgspec.Struct, frozen=True):
    """The outcome of a reserve: ``reserved`` (go ahead) or the entry that stops it."""

    status: Literal["reserved", "running", "done", "unknown"]
    entry: Entry


class Ledger:
    """Every key of one profile that is not free."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.entries: dict[str, Entry] = {}
        self.writes: list[Write] = []

    def restore(self, entries: Iterable[Entry]) -> None:
        for e in entries:
            self.entries[e.key] = e

    def reserve(
        self, key: str, sid: str, live: Live, *, ttl: float | None, note: str
    ) -> Reservation:
        """Reserve ``key`` for ``sid`` if it is free; else say what holds it."""
        entry = self.current(key, live)
        if entry is not None:
            return Reservation(entry.state, entry)
        now = self.clock.now()
        entry = Entry(key, "running", sid, now, now, ttl=ttl, note=note)
        self._put(entry)
        return Reservation("reserved", entry)

    def finish(self, key: str, sid: str, outcome: Literal["done", "free"]) -> Entry | None:
        """The runner ``sid`` says how it ended; the entry after it (None: free).

        Only the runner of a ``running`` entry can finish it; anyone else (or a runner
        whose entry already turned ``unknown``) changes nothing and gets the entry.
        """
        entry = self.entries.get(key)
        if entry is None or entry.state != "running" or entry.session_id != sid:
            return entry
        if outcome == "free":
            self._delete(key)
            return None
        now = self.clock.now()
        expires = None if entry.ttl is None else now + entry.ttl
        done = replace(entry, state="done", updated_at=now, expires_at=expires)
        self._put(done)
        return done

    def resolve(
        self, key: str, state: Literal["done", "free"], by: str | None, live: Live
    ) -> Entry | None:
        """A person settles ``key``; the entry before it (None: it was free)."""
        entry = self.current(key, live)
        if entry is not None and entry.state == "running":
            raise LedgerRefused(
                f"{key} is running now (session {entry.session_id}, still live): "
                "wait for it to finish; if it hangs, end that session and resolve the "
                "key once it shows unknown"
            )
        if state == "free":
            if entry is not None:
                self._delete(key)
        else:
            now = self.clock.now()
            base = entry or Entry(key, "done", by or "", now, now)
            self._put(replace(base, state="done", updated_at=now, expires_at=None, resolved_by=by))
        return entry

    def current(self, key: str, live: Live) -> Entry | None:
        """The entry of ``key`` as it stands now (a dead runner's ``running`` is ``unknown``,
        a ``done`` past its ttl is free)."""
        entry = self.entries.get(key)
        if entry is None:
            return None
        if entry.state == "running" and not live(entry.session_id):
            entry = replace(entry, state="unknown", updated_at=self.clock.now())
            self._put(entry)
        elif entry.expires_at is not None and self.clock.now() >= entry.expires_at:
            self._delete(key)
            return None
        return entry

    def sweep(self, live: Live) -> list[Entry]:
        """Turn the entries of runners that are gone ``unknown``, forget expired ``done``
        entries; the entries that turned ``unknown``."""
        out = []
        for key in list(self.entries):
            before = self.entries[key]
            after = self.current(key, live)
            if after is not None and after.state == "unknown" and before.state == "running":
                out.append(after)
        return out

    def listing(self, live: Live) -> list[Entry]:
        self.sweep(live)
        return sorted(self.entries.values(), key=lambda e: e.key)

    def put_back(self, key: str, entry: Entry | None) -> None:
        """Undo a change the disk refused: ``key`` as it was (nothing to store)."""
        if entry is None:
            self.entries.pop(key, None)
        else:
            self.entries[key] = entry

    def drain(self) -> list[Write]:
        writes, self.writes = self.writes, []
        return writes

    def _put(self, entry: Entry) -> None:
        self.entries[entry.key] = entry
        self.writes.append(("ledger.put", entry))

    def _delete(self, key: str) -> None:
        self.entries.pop(key, None)
        self.writes.append(("ledger.delete", key))
