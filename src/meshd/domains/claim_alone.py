"""The local-only mark of fleet-wide claims, kept in the database (SPEC §12).

Under ``on_partition = "local"`` a fleet-wide set granted while the fleet is out of
reach is local-only until the fleet decides it (the heal, docs/FLEET.md). The mark
lives in the fleet's memory; a restart of meshd before the link returns would lose it,
and the restart reconcile would then take the claim for a fleet claim the bucket lost
(lost, "cut off from the fleet longer than its lease") and its local token for a
fleet token (every later fleet-wide claim refused, "below token ... already granted").
So the marked claims are written to ``meta`` (:data:`KEY`) with the claim they mark,
and a start hands them back to the fleet, to be healed like any local-only set.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable

from meshd.core.claims.records import Claim
from meshd.core.state import Write
from meshd.store.sessions import load_meta

KEY = "fleet.local_only"
"""``meta`` key: JSON list of ``[session, resource, token]``, one per local-only claim."""

Marked = frozenset[tuple[str, str, int]]


class LocalOnlyMarks:
    """The local-only claims as last written, and as restored at the start."""

    def __init__(self) -> None:
        self._written: Marked = frozenset()
        self._restored: Marked = frozenset()
        """Until the first fleet of this process asks (:meth:`restored`)."""

    @property
    def stored(self) -> bool:
        """Whether a local-only claim is marked in the database now."""
        return bool(self._written)

    def restore(self, db: sqlite3.Connection) -> None:
        raw = load_meta(db, KEY)
        try:
            marked = frozenset((str(s), str(r), int(t)) for s, r, t in json.loads(raw or "[]"))
        except (TypeError, ValueError):
            marked = frozenset()  # unreadable: the restart reconcile, as before the key
        self._written = self._restored = marked

    def write(self, claims: Iterable[Claim], local_only: set[tuple[str, str]]) -> Write | None:
        """The ``meta`` write that records the claims marked ``local_only`` now (with
        their tokens: a claim released and taken again is not the one marked), or None
        when that is what was written last."""
        marked = frozenset(
            (c.session_id, c.resource, c.token)
            for c in claims
            if (c.session_id, c.resource) in local_only
        )
        if marked == self._written:
            return None
        self._written = marked
        return ("meta.set", KEY, json.dumps(sorted(marked)))

    def restored(self, claims: Iterable[Claim]) -> set[tuple[str, str]]:
        """The (session, resource) pairs of ``claims`` that were local-only when the
        daemon last stopped, same token; once (a later fleet of this process offers
        every claim its predecessor did not hold in the fleet: docs/FLEET.md)."""
        marked, self._restored = self._restored, frozenset()
        return {
            (c.session_id, c.resource)
            for c in claims
            if (c.session_id, c.resource, c.token) in marked
        }
