"""Params and results of ``signal.emit`` and ``signal.wait`` (SPEC §7, §9, §10).

Names are free text without whitespace (put the run in the name for recurring
pipelines: ``research-done:2026-11-29``). A payload is any JSON value, at most
``max_body_bytes`` encoded. ``signal.wait`` answers at once when the newest
signal of the name is newer than ``after`` (and emitted within ``since``
seconds), else when the next one is emitted, else ``received: false`` when
``timeout`` runs out -- an outcome, not an error. The timeout is capped by
``max_query_timeout`` unless ``session_id`` names a live session (the wait then
ends with the session).
"""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta

from meshd.protocol.methods import MethodSpec, Params, Result, SessionId

SignalName = Annotated[str, Meta(min_length=1, max_length=200, pattern=r"^[^\s]+$")]


class SignalEmitParams(Params):
    """Emit ``name`` (its next sequence number). ``session_id``: the emitter, if any."""

    name: SignalName
    payload: Any = None
    session_id: SessionId | None = None


class SignalRecord(Result):
    name: str
    seq: int
    payload: Any = None
    emitted_by: str | None = None
    emitted_at: str = ""


class SignalWaitParams(Params):
    """The newest signal of ``name`` newer than ``after`` / emitted within ``since`` s."""

    name: SignalName
    after: Annotated[int, Meta(ge=0)] | None = None
    since: Annotated[float, Meta(gt=0, le=31_536_000)] | None = None
    timeout: Annotated[float, Meta(ge=0)] = 10.0
    session_id: SessionId | None = None


class SignalWaitResult(Result):
    """``received``: a signal came (its fields are set); else the wait ran out."""

    name: str
    received: bool
    seq: int | None = None
    payload: Any = None
    emitted_by: str | None = None
    emitted_at: str | None = None
    last_seq: int = 0
    waited_s: float = 0.0


SIGNAL_EMIT = MethodSpec("signal.emit", SignalEmitParams, SignalRecord, "Emit a signal.")
SIGNAL_WAIT = MethodSpec(
    "signal.wait", SignalWaitParams, SignalWaitResult, "Wait for a signal (pushed, no polling)."
)
