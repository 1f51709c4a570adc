"""Params and results of ``notes.add``, ``notes.list`` and ``notes.remove`` (SPEC §7, §9, §10).

A note's author is the session that wrote it (``session_id``), set by the
daemon from the params, never from the text. ``notes.list`` reads for
``session_id`` (the reader): shared notes of every notebook and the reader's
own private ones; a caller that names no session reads shared notes only.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from meshd.protocol.methods import MethodSpec, Params, Result, SessionId

NoteText = Annotated[str, Meta(min_length=1)]


class NoteAddParams(Params):
    """Write into ``session_id``'s notebook. ``private``: only that session reads it."""

    session_id: SessionId
    text: NoteText
    private: bool = False


class NoteEntry(Result):
    id: int
    session_id: str
    text: str
    private: bool
    at: str


class NoteAddResult(Result):
    id: int = 0
    session_id: str = ""
    private: bool = False
    at: str = ""
    disabled: bool = False


class NoteListParams(Params):
    """Notes ``session_id`` may read (of ``author`` only, when given), oldest first;
    the newest ``limit``. Notes holding more than 4 MiB of text in all are
    ``TOO_LARGE`` (``data.limit``): ask for fewer."""

    session_id: SessionId | None = None
    author: SessionId | None = None
    limit: Annotated[int, Meta(ge=1, le=10_000)] = 200


class NoteListResult(Result):
    entries: list[NoteEntry] = []


class NoteRemoveParams(Params):
    """Remove note ``id`` from ``session_id``'s own notebook (its author only)."""

    session_id: SessionId
    id: int


class NoteRemoveResult(Result):
    id: int = 0
    removed: bool = False
    disabled: bool = False


NOTES_ADD = MethodSpec("notes.add", NoteAddParams, NoteAddResult, "Write a note.")
NOTES_LIST = MethodSpec("notes.list", NoteListParams, NoteListResult, "Read notebooks.")
NOTES_REMOVE = MethodSpec(
    "notes.remove", NoteRemoveParams, NoteRemoveResult, "Remove a note (its author only)."
)
