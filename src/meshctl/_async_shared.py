"""Shared work for :class:`meshctl.AsyncSession` (SPEC §7, §10): the async twins of
``s.notes``, ``s.signal(NAME)`` and ``s.once(KEY)`` in :mod:`meshctl._shared`.

::

    async with mesh.session(task="…") as s:
        await s.notes.add("API base is /v2")
        await s.signal("data-ready").emit({"rows": 10})
        got = await s.signal("data-ready").wait(timeout=30)
        async with s.once("finance-daily:2026-11-29") as first:
            if first:
                await send_report()

The same rules as the blocking client: notes and signals are no-ops on a
disabled session; ``once`` never fails open (an unreachable daemon raises) and
runs unguarded only when the mesh is switched off in config, saying so.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any

from meshctl import _log as log
from meshctl._shared import Note, SignalRecord, notes_of, once_params, received, wait_params

if TYPE_CHECKING:
    from meshctl._async import AsyncSession


class AsyncNotebook:
    """``s.notes`` of an :class:`AsyncSession`."""

    def __init__(self, session: AsyncSession) -> None:
        self._s = session

    async def add(self, text: str, private: bool = False) -> Note | None:
        raw = await self._s._mcall("notes.add", {"text": text, "private": private})
        if raw is None or raw.get("disabled"):
            return None
        return Note(int(raw["id"]), str(raw["session_id"]), text, private, str(raw["at"]))

    async def list(self, session_id: str | None = None, limit: int = 200) -> list[Note]:
        params: dict[str, Any] = {"limit": limit}
        if session_id is not None:
            params["author"] = session_id
        return notes_of(await self._s._mcall("notes.list", params))


class AsyncSignal:
    """``s.signal(NAME)`` of an :class:`AsyncSession`."""

    def __init__(self, session: AsyncSession, name: str) -> None:
        self._s = session
        self.name = name

    async def emit(self, payload: Any = None) -> SignalRecord | None:
        raw = await self._s._mcall("signal.emit", {"name": self.name, "payload": payload})
        return None if raw is None else SignalRecord.from_wire(raw)

    async def wait(
        self, after: int | None = None, since: float | None = None, timeout: float = 10.0
    ) -> SignalRecord | None:
        params = wait_params(self.name, after, since, timeout)
        return received(await self._s._mcall("signal.wait", params, wait=timeout))


class AsyncOnce:
    """``async with s.once(KEY) as first:`` (see :class:`meshctl.Once`)."""

    def __init__(self, session: AsyncSession, key: str, ttl: float | None, note: str) -> None:
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
        raw = await self._s._mcall("once.reserve", self._params)
        if raw is None:
            from meshd.protocol.errors import MeshUnavailable

            raise MeshUnavailable(f"once({self.key!r}): the session has ended; not running")
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
        params = {"key": self.key, "outcome": "done" if exc_type is None else "free"}
        self.finished = await self._s._mcall("once.finish", params)
