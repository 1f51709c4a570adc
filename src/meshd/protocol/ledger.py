"""Params and results of ``once.*``: the at-most-once ledger (SPEC §7, §9, §10).

``once.reserve`` either reserves the key for the session (``status:
"reserved"``: go ahead) or says what stops it (``running``, ``done``,
``unknown``: do not run). The runner then calls ``once.finish`` with ``done``
or ``free``. A runner that goes away first leaves the key ``unknown`` until
``once.resolve``. Every change is synced to disk before the reply.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from meshd.protocol.methods import MethodSpec, Params, Result, Seconds, SessionId

LedgerKey = Annotated[str, Meta(min_length=1, max_length=512)]
LedgerState = Literal["running", "done", "unknown"]


class OnceReserveParams(Params):
    """Reserve ``key`` for ``session_id`` if it is free. ``ttl``: a ``done`` record is
    forgotten that many seconds after it was recorded. ``note``: what runs (shown)."""

    session_id: SessionId
    key: LedgerKey
    ttl: Seconds | None = None
    note: Annotated[str, Meta(max_length=200)] = ""


class LedgerEntry(Result):
    key: str
    state: LedgerState
    session_id: str
    reserved_at: str
    updated_at: str
    ttl: float | None = None
    expires_at: str | None = None
    note: str = ""
    resolved_by: str | None = None


class OnceReserveResult(Result):
    """``reserved``: run now. Otherwise do not run: ``entry`` says who, when."""

    status: Literal["reserved", "running", "done", "unknown"]
    key: str
    entry: LedgerEntry | None = None
    disabled: bool = False


class OnceFinishParams(Params):
    """The runner's word: ``done`` (it happened) or ``free`` (it did not; may run again)."""

    session_id: SessionId
    key: LedgerKey
    outcome: Literal["done", "free"]


class OnceFinishResult(Result):
    """``ok``: recorded. Else the key was not this session's running key (``state``
    says what it is: ``unknown`` when the runner had been given up for gone)."""

    key: str
    ok: bool
    state: Literal["free", "running", "done", "unknown"]
    entry: LedgerEntry | None = None


class OnceResolveParams(Params):
    """A person settles ``key``: ``done`` (it happened) or ``free`` (run it again)."""

    key: LedgerKey
    state: Literal["done", "free"]
    session_id: SessionId | None = None
    by: Annotated[str, Meta(min_length=1, max_length=200)] | None = None
    """Who settled it (the person's name; else the acting ``session_id``): a later
    caller that finds the key ``done`` is told who (SPEC §7 "who, when")."""


class OnceResolveResult(Result):
    """``refused``: the key is running under a live session (an outcome, not an error:
    freeing it would let a second runner start); ``reason`` says what to do."""

    key: str
    state: Literal["done", "free", "running"]
    previous: LedgerEntry | None = None
    refused: bool = False
    reason: str = ""


class OnceListParams(Params):
    """Keys that are not free (``prefix``: those starting with it)."""

    prefix: str = ""


class OnceListResult(Result):
    entries: list[LedgerEntry] = []


ONCE_RESERVE = MethodSpec(
    "once.reserve", OnceReserveParams, OnceReserveResult, "Reserve a key (at most once)."
)
ONCE_FINISH = MethodSpec("once.finish", OnceFinishParams, OnceFinishResult, "Record done or free.")
ONCE_RESOLVE = MethodSpec(
    "once.resolve", OnceResolveParams, OnceResolveResult, "Settle an unknown key."
)
ONCE_LIST = MethodSpec("once.list", OnceListParams, OnceListResult, "Keys and their states.")
