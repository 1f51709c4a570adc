"""Shared work of a session (SPEC §7, §10): ``s.notes``, ``s.signal(NAME)``, ``s.once(KEY)``.

::

    async with mesh.session(task="…") as s:
        await s.notes.add("API base is /v2")           # shared; private=True: only s reads it
        await s.notes.list()                            # every note s may read
        await s.signal("data-ready").emit({"rows": 10})
        got = await s.signal("data-ready").wait(timeout=30)  # a SignalRecord, or None
        async with s.once("finance-daily:2026-11-29") as first:
            if first:
                await send_report()

One source for both drivers: ``scripts/unasync.py`` writes the blocking
:mod:`meshctl._sync.shared` from this file. Like the rest of the session, notes
and signals are no-ops while the session is not active (the mesh disabled, or
unreachable with ``fail_open``). The ledger is the exception: ``once`` **never
fails open** -- an unreachable daemon raises :class:`MeshUnavailable` and the
block must not run the side effect. Only a mesh switched off in config
(``enabled = false``) lets it run unguarded, as ``meshctl once`` does, and says so.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any

from meshctl import _log as log
from meshctl._core.shared import Note, SignalRecord, notes_of, once_params, received, wait_params
from meshd.protocol.errors import MeshUnavailable

if TYPE_CHECKING:
    from meshctl._async.abc import AsyncSessionLike


class AsyncNotebook:
    """``s.notes``: the session's notebook, and the notes of others it may read."""

    def __init__(self, session: AsyncSessionLike) -> None:
        self._s = session

    async def add(self, text: str, private: bool = False) -> Note | None:
        """Write a note (``private``: only this session will ever read it)."""
        raw = await self._s._mcall("notes.add", {"text": text, "private": private})
        if raw is None or raw.get("disabled"):
            return None
        return Note(int(raw["id"]), str(raw["session_id"]), text, private, str(raw["at"]))

    async def list(self, session_id: str | None = None, limit: int = 200) -> list[Note]:
        """Notes this session may read: every shared note and its own private ones
        (only ``session_id``'s notebook when given), oldest first."""
        params: dict[str, Any] = {"limit": limit}
        if session_id is not None:
            params["author"] = session_id
        return notes_of(await self._s._mcall("notes.list", params))


class AsyncSignal:
    """``s.signal(NAME)``: emit it, or wait for it (pushed by the daemon, never polled)."""

    def __init__(self, session: AsyncSessionLike, name: str) -> None:
        self._s = session
        self.name = name

    async def emit(self, payload: Any = None) -> SignalRecord | None:
        """Emit the next signal of this name; its record (``seq``)."""
        raw = await self._s._mcall("signal.emit", {"name": self.name, "payload": payload})
        return None if raw is None else SignalRecord.from_wire(raw)

    async def wait(
        self, after: int | None = None, since: float | None = None, timeout: float = 10.0
    ) -> SignalRecord | None:
        """The newest signal newer than ``after`` (emitted within ``since`` seconds),
        waiting up to ``timeout`` seconds for one; None when none came."""
        params = wait_params(self.name, after, since, timeout)
        return received(await self._s._mcall("signal.wait", params, wait=timeout))


class AsyncOnce:
    """``async with s.once(KEY) as first:`` -- True only for the one caller that may run.

    Leaving the block records ``done``; an exception frees the key (it may run
    again) and propagates. A process that dies inside the block leaves the key
    ``unknown`` until a person resolves it (``meshctl once --resolve KEY done|free``).
    ``status`` says what the reserve found (``reserved``, ``running``, ``done``,
    ``unknown``) and ``entry`` who holds it and since when.
    """

    def __init__(self, session: AsyncSessionLike, key: str, ttl: float | None, note: str) -> None:
        self._s = session
        self.key = key
        self._params = once_params(key, ttl, note)
        self.first = False
        self.status = ""
        self.entry: dict[str, Any] | None = None
        self.finished: dict[str, Any] | None = None

    async def __aenter__(self) -> bool:
        if self._s.disabled:
            log.warning("Session Mesh is disabled: once(%r) runs unguarded", self.key)
            self.status, self.first = "disabled", True
            return True
        if not self._s.active:
            self._s._check_usable()  # ended or never started: said as such, not running
            raise MeshUnavailable(f"once({self.key!r}): the mesh is unreachable; not running")
        raw = await self._s._mcall("once.reserve", self._params)
        if raw is None:  # failing open is never an option here
            raise MeshUnavailable(f"once({self.key!r}): the mesh is unreachable; not running")
        self.status = str(raw.get("status"))
        self.entry = raw.get("entry")
        self.first = self.status == "reserved"
        return self.first

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.first or self.status == "disabled":
            return
        outcome = "done" if exc_type is None else "free"
        params = {"key": self.key, "outcome": outcome}
        try:
            self.finished = await self._s._mcall("once.finish", params)
        except MeshUnavailable as failure:
            log.warning(
                "Session Mesh: could not record %s for %r (%s); it turns unknown when "
                "this session ends",
                outcome, self.key, failure,
            )  # fmt: skip
            return
        if self.finished is not None and not self.finished.get("ok"):
            log.warning(
                "Session Mesh: %r is %s now, not recorded as %s (resolve it by hand)",
                self.key, self.finished.get("state"), outcome,
            )  # fmt: skip

    def __bool__(self) -> bool:
        return self.first

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key!r} {self.status or 'not entered'}>"
