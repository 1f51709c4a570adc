"""The notebook (SPEC §7): every session's notes, shared or private. Pure.

A note belongs to the session that wrote it (its *author*) and outlives it:
notebooks stay after their sessions end and across restarts, until the author
removes a note (``notes rm``): ``history_days`` never prunes them (SPEC §2). A
``shared`` note may be read by every session of the profile; a ``private`` one
by its author alone, and only while that same registration lives (SPEC §4): the
note keeps the registration (``reg``) it was written under, so neither naming
the id after the session ended nor a new session registered under the same id
reads it.

Privacy is decided here, in one function (:func:`visible`), and every answer
that carries notes goes through :meth:`Notebook.read`: a reader that is not the
author's live registration never gets a private note, whatever method asked. A
reader of ``None`` (a caller that acts for no live session) is a stranger to
every notebook.

What must be stored is left in :attr:`Notebook.writes` as ``("note.put", note)``
and ``("note.rm", note)``; the clock is injected.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from meshd.core.clock import Clock, SteadyWall
from meshd.protocol.errors import Forbidden, NotFound, TooLarge

Write = tuple[Any, ...]


class Note(msgspec.Struct, frozen=True):
    """One entry of a notebook."""

    id: int
    author: str
    text: str
    private: bool
    at: float
    reg: str = ""  # the author's registration when it wrote the note


class Reader(msgspec.Struct, frozen=True):
    """A live session reading (or writing): its id and its registration."""

    session_id: str
    reg: str


def visible(note: Note, reader: Reader | None) -> bool:
    """Whether ``reader`` may see ``note``: shared notes to all, private to the
    registration that wrote it."""
    return not note.private or (
        reader is not None and note.author == reader.session_id and note.reg == reader.reg
    )


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


class Notebook:
    """Every notebook of one profile, oldest note first."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.steady = SteadyWall(clock)  # ages for pruning: wall-clock steps do not count
        self.notes: dict[int, Note] = {}
        self.writes: list[Write] = []
        self._next_id = 1

    def restore(self, notes: Iterable[Note]) -> None:
        """Put back what the database held (ids keep counting above the highest)."""
        for n in sorted(notes, key=lambda n: n.id):
            self.notes[n.id] = n
            self._next_id = max(self._next_id, n.id + 1)

    def add(self, author: Reader, text: str, *, private: bool, limit: int) -> Note:
        """Write ``text`` into ``author``'s notebook; refused when over ``limit`` bytes."""
        size = utf8_len(text)
        if size > limit:
            raise TooLarge(
                f"the note is {size} bytes; the limit is {limit} (max_body_bytes)",
                {"path": "$.text", "limit": limit},
            )
        note = Note(self._next_id, author.session_id, text, private, self.clock.now(), author.reg)
        self._next_id += 1
        self.notes[note.id] = note
        self.writes.append(("note.put", note))
        return note

    def discard(self, note: Note) -> None:
        """Forget a note the disk refused to store (never acknowledged, so never there)."""
        self.notes.pop(note.id, None)

    def remove(self, reader: Reader | None, note_id: int) -> Note:
        """Remove note ``note_id``: its author's session only (a private note, the
        registration that wrote it only). A note ``reader`` may not see is not found."""
        note = self.notes.get(note_id)
        if note is None or not visible(note, reader):
            raise NotFound(f"no note #{note_id}", {"id": note_id})
        if reader is None or note.author != reader.session_id:
            raise Forbidden(
                f"note #{note_id} was written by {note.author}: only its author removes it",
                {"id": note_id, "author": note.author},
            )
        del self.notes[note_id]
        self.writes.append(("note.rm", note))
        return note

    def put_back(self, note: Note) -> None:
        """Take back a removal the disk refused to store (never acknowledged), in its
        place: notebooks read oldest first."""
        self.notes[note.id] = note
        self.notes = dict(sorted(self.notes.items()))

    def read(
        self,
        reader: Reader | None,
        *,
        author: str | None = None,
        limit: int | None = None,
    ) -> list[Note]:
        """The notes ``reader`` may see (of ``author`` only, when given), oldest first;
        the newest ``limit`` of them when given.

        With a ``limit`` (``notes.list`` always has one) the walk starts at the newest
        note and stops once it has them: the default 200 of a notebook of 100,000 notes
        look at 200 notes, not 100,000, on the daemon's loop (ids only grow and the dict
        is kept in id order, so walking it backwards is newest first)."""
        if limit is None:
            return [
                n
                for n in self.notes.values()
                if (author is None or n.author == author) and visible(n, reader)
            ]
        out: list[Note] = []
        if limit < 1:
            return out
        for n in reversed(self.notes.values()):
            if (author is None or n.author == author) and visible(n, reader):
                out.append(n)
                if len(out) == limit:
                    break
        out.reverse()
        return out

    def drain(self) -> list[Write]:
        writes, self.writes = self.writes, []
        return writes
