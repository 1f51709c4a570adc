"""How ``claim.*`` says what the core decided: its claim values as protocol results.

Every path that answers a claim request shapes its reply here -- a direct acquire
or steal and a queued wait answered later (:mod:`meshd.domains.claim_waits`), the
fleet path (:mod:`meshd.domains.claim_fleet`), ``claim.check``
(:mod:`meshd.domains.claim_reads`) -- so a holder, a grant and a ``held`` read
the same whichever way they came. Functions of the state, no I/O.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import TYPE_CHECKING

from meshd.keys import describe
from meshd.protocol import claims as pc
from meshd.protocol.contract import rfc3339

if TYPE_CHECKING:
    from meshd.core.claims.records import Claim, Granted, Held, Previous
    from meshd.core.state import MeshState

HOME = os.path.expanduser("~")


def holder(st: MeshState, c: Claim, host: str | None = None) -> pc.ClaimHolder:
    """``c`` as a holder; ``host``: this host's name when the key is fleet-wide."""
    s = st.registry.sessions.get(c.session_id)
    return pc.ClaimHolder(
        session_id=c.session_id, resource=c.resource, task=s.task if s else "",
        since=rfc3339(c.since), reason=c.reason, mode=c.mode, profile=st.profile,
        branch=s.branch if s else None, host=host,
    )  # fmt: skip


def warning(st: MeshState, c: Claim) -> str:
    """The human sentence: "cli:… is editing ~/p (branch x) since 14:02 — refactor".

    The same sentence ``meshctl check`` prints after ``held:`` (``meshctl.
    _claims.holder_line``): a shared claim "is sharing", a path "is editing", any
    other key "holds" it, named as the key is written (``res:db``); after the dash
    the claim's reason, else the holder's task.
    """
    s = st.registry.sessions.get(c.session_id)
    verb = "is sharing" if c.mode == "shared" else "is editing" if c.key.is_path else "holds"
    shown = describe(c.key, home=HOME) if c.key.is_path else c.resource
    branch = f" (branch {s.branch})" if s is not None and s.branch else ""
    since = datetime.fromtimestamp(c.since).strftime("%H:%M")
    what = c.reason or (s.task if s is not None else "")
    tail = f" — {what}" if what else ""
    return f"{c.session_id} {verb} {shown}{branch} since {since}{tail}"


def previous(p: Previous) -> pc.ClaimPrevious:
    return pc.ClaimPrevious(
        resource=p.resource, session_id=p.session_id, how=p.how, at=rfc3339(p.at)
    )


def granted(st: MeshState, g: Granted, waited: float = 0.0) -> pc.ClaimAcquireResult:
    prev = {p.resource: previous(p) for p in g.previous}
    grants = [
        pc.ClaimGrant(
            resource=c.resource, mode=c.mode, token=c.token,
            already_held=c.resource in g.held_before, previous=prev.get(c.resource),
        )
        for c in g.claims
    ]  # fmt: skip
    return pc.ClaimAcquireResult(
        status="granted", claims=grants, token=g.token, already_held=g.already_held,
        previous=next(iter(prev.values()), None),
        stolen=[holder(st, c) for c in g.stolen], waited_s=round(waited, 3),
    )  # fmt: skip


def held(st: MeshState, h: Held, waited: float = 0.0, withdrawn: str = "") -> pc.ClaimAcquireResult:
    ahead = [
        pc.ClaimWaiting(
            session_id=w.session_id, resources=list(w.resources), mode=w.mode,
            since=rfc3339(w.since),
        )
        for w in h.ahead
    ]  # fmt: skip
    return pc.ClaimAcquireResult(
        status="held", holders=[holder(st, c) for c in h.holders], deadlock=h.deadlock,
        ahead=ahead, more_ahead=h.more_ahead, waited_s=round(waited, 3), withdrawn=withdrawn,
    )  # fmt: skip
