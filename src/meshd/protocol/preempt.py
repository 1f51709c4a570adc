"""``claim.preempt``, ``session.pause``, ``session.resume``: cooperative preemption (SPEC §5b).

A preemptor that out-ranks every holder of its set asks them to checkpoint and
pause; nothing is taken by force. A holder that pauses leaves a checkpoint note
and releases its claims into a reserved set (its preemptors first, then itself);
``session.resume`` queues for that set and returns the note.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from meshd.protocol.claims import ClaimHolder, Resources
from meshd.protocol.methods import MethodSpec, Params, Result, SessionId

Note = Annotated[str, Meta(min_length=1)]
"""A checkpoint note: a note and a handoff, so bounded by ``max_body_bytes`` (SPEC §2),
which the daemon checks (``TOO_LARGE``); a fixed cap here would disagree with a
configured one."""


class PreemptParams(Params):
    """Ask the lower-ranked holders of ``resources`` to checkpoint and pause."""

    session_id: SessionId
    resources: Resources
    reason: Annotated[str, Meta(max_length=200)] = ""
    broad: bool = False


class PreemptHolder(Result):
    session_id: str
    resources: list[str]
    rank: int
    task: str = ""
    paused: bool = False
    """A paused session whose reserved set holds ``resources``: it is not asked (it is at
    its checkpoint already); the preemptor is served first on the set instead."""


class PreemptResult(Result):
    """``asked`` (holders told, grace running), ``free`` (nobody holds it), or ``held``
    with ``reason: rank`` (a holder is not out-ranked: nobody was asked)."""

    status: Literal["asked", "free", "held"]
    reason: Literal["", "rank"] = ""
    holders: list[PreemptHolder] = []
    rank: int = 0
    grace_s: float = 0.0
    preemption_id: int | None = None
    deadline: str | None = None


class PauseParams(Params):
    """Checkpoint: leave ``note`` (a shared note and a handoff), release into a reserved set."""

    session_id: SessionId
    note: Note


class PauseResult(Result):
    session_id: str
    status: Literal["paused"] = "paused"
    reserved: list[str] = []
    first: list[str] = []  # preemptors the reserved set is kept for before this session
    handoff_id: int | None = None
    note_id: int | None = None


class ResumeParams(Params):
    """Queue for the reserved set (waiting up to ``wait``), get the checkpoint note back."""

    session_id: SessionId
    wait: Annotated[float, Meta(gt=0)] | None = None  # capped to max_query_timeout


class ResumeResult(Result):
    """``resumed`` (the set is held again, or nothing was reserved) or ``held``
    (the wait ran out; still paused). ``reservation``: ``kept`` (served from it),
    ``none`` (nothing was held at the pause), ``lost`` (a daemon restart dropped it:
    reservations are not durable; the set was asked for like anyone's)."""

    session_id: str
    status: Literal["resumed", "held"]
    note: str = ""
    reservation: Literal["kept", "none", "lost"] = "none"
    resources: list[str] = []
    token: int | None = None
    holders: list[ClaimHolder] = []
    waited_s: float = 0.0


PREEMPT = MethodSpec(
    "claim.preempt", PreemptParams, PreemptResult,
    "Ask lower-ranked holders of a set to checkpoint and pause (never takes by force).",
)  # fmt: skip
PAUSE = MethodSpec(
    "session.pause", PauseParams, PauseResult,
    "Checkpoint note, status paused, claims into a reserved set.",
)  # fmt: skip
RESUME = MethodSpec(
    "session.resume", ResumeParams, ResumeResult,
    "Queue for the reserved set; returns the checkpoint note; status back.",
)  # fmt: skip
