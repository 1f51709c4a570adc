"""Shared work without I/O (SPEC §7, §10): the records of notes and signals, and the
params of a signal wait and a ledger reservation, for both drivers' ``s.notes``,
``s.signal(NAME)`` and ``s.once(KEY)`` (:mod:`meshctl._async.shared`, and the
blocking :mod:`meshctl._sync.shared` generated from it).

Standard library only (the blocking client's rule).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple


class Note(NamedTuple):
    """One notebook entry; ``session_id`` is its author."""

    id: int
    session_id: str
    text: str
    private: bool
    at: str

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> Note:
        return cls(
            int(raw["id"]), str(raw["session_id"]), str(raw["text"]),
            bool(raw.get("private")), str(raw.get("at", "")),
        )  # fmt: skip


class SignalRecord(NamedTuple):
    """One emitted signal."""

    name: str
    seq: int
    payload: Any
    emitted_by: str | None
    emitted_at: str

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> SignalRecord:
        return cls(
            str(raw["name"]), int(raw["seq"]), raw.get("payload"),
            raw.get("emitted_by"), str(raw.get("emitted_at") or ""),
        )  # fmt: skip


def notes_of(raw: Any) -> list[Note]:
    return [] if raw is None else [Note.from_wire(e) for e in raw.get("entries") or []]


def wait_params(
    name: str, after: int | None, since: float | None, timeout: float
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "timeout": timeout}
    if after is not None:
        params["after"] = after
    if since is not None:
        params["since"] = since
    return params


def received(raw: Any) -> SignalRecord | None:
    """The signal a wait got, or None when it ran out (or the session is a no-op)."""
    if raw is None or not raw.get("received"):
        return None
    return SignalRecord.from_wire(raw)


def once_params(key: str, ttl: float | None, note: str) -> dict[str, Any]:
    params: dict[str, Any] = {"key": key}
    if ttl is not None:
        params["ttl"] = ttl
    if note:
        params["note"] = note[:200]
    return params
