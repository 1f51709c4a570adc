"""``notes.add``, ``notes.list`` and ``notes.remove``: the notebook (SPEC §7).

Who may read what is decided by :mod:`meshd.core.work.notes` alone; this module
only checks the author is a live session, names the reader's live registration
(:func:`reader_of`), and stores the note before the reply.
"""

from __future__ import annotations

import sqlite3

from meshd.core.work.notes import Note, Reader
from meshd.domain import Domain
from meshd.protocol import notes as pn
from meshd.protocol.contract import rfc3339
from meshd.protocol.errors import TooLarge
from meshd.service import Conn, Service
from meshd.slices import Slices
from meshd.store import shared as storage_shared

MAX_LIST_TEXT = 4 << 20
"""Characters of note text one ``notes.list`` answers with at most (4 MiB; 10,000
notes of 200 characters are 2 MiB; the default ``limit`` of 200 at ``max_body_bytes``
8,192 is 1.6 MiB)."""


def reader_of(svc: Service, sid: str | None) -> Reader | None:
    """The reader a ``session_id`` names: its live registration, or a stranger (an id
    whose session ended, or was never registered, reads no private note)."""
    s = svc.state.registry.sessions.get(sid) if sid is not None else None
    return Reader(s.session_id, s.reg) if s is not None else None


def entry(n: Note) -> pn.NoteEntry:
    return pn.NoteEntry(
        id=n.id, session_id=n.author, text=n.text, private=n.private, at=rfc3339(n.at)
    )


class NoteHandlers(Domain):
    name = "notes"

    def install(self) -> None:
        self.svc.add(pn.NOTES_ADD, self.add, is_async=True)
        self.svc.add(pn.NOTES_LIST, self.list, is_async=True)
        self.svc.add(pn.NOTES_REMOVE, self.remove, is_async=True)

    def restore(self, db: sqlite3.Connection) -> None:
        """Take back shared work (start-up, before anything is served): one read of its
        tables gives the notebook, the newest signal and the counter of every name, the
        ledger and the board marks. A ledger entry whose runner did not come back turns
        ``unknown`` at the first sweep, and in any case before anyone is told about it."""
        st = self.svc.state
        got = storage_shared.load(db)
        st.notes.restore(got.notes)
        st.signals.restore(got.signals, got.counters)
        st.ledger.restore(got.ledger)
        st.marks.restore(got.marks)

    async def add(self, p: pn.NoteAddParams, conn: Conn) -> pn.NoteAddResult:
        work = self.svc.state
        if not self.svc.state.settings.enabled:
            return pn.NoteAddResult(disabled=True)
        s = self.svc.state.registry.get(p.session_id)
        limit = self.svc.state.settings.max_body_bytes
        note = work.notes.add(Reader(s.session_id, s.reg), p.text, private=p.private, limit=limit)
        await self.svc.commit()  # refused: MeshState.forget drops the note again
        return pn.NoteAddResult(
            id=note.id, session_id=note.author, private=note.private, at=rfc3339(note.at)
        )

    async def list(self, p: pn.NoteListParams, conn: Conn) -> pn.NoteListResult:
        """The notes as they are at the read, at most :data:`MAX_LIST_TEXT` of text.

        Their entries are made in slices (:mod:`meshd.slices`): 10,000 of them held
        every other client 40-90 ms in one go (bench/request_stall.py). An answer of
        more text is refused (``TOO_LARGE`` with the limit) before any is made: its
        encoding is one step on the loop, and 10,000 notes of 8 KiB made a line of
        80 MB that no client reads (meshctl takes 64 MiB). A note removed meanwhile is
        still listed: the answer is the notebook at the moment it was read."""
        work = self.svc.state
        reader = reader_of(self.svc, p.session_id)
        notes = work.notes.read(reader, author=p.author, limit=p.limit)
        text = sum(len(n.text) for n in notes)
        if text > MAX_LIST_TEXT:
            raise TooLarge(
                f"these {len(notes):,} notes hold {text:,} characters of text; one answer "
                f"carries at most {MAX_LIST_TEXT:,} (ask for fewer: limit)",
                {"path": "$.limit", "limit": MAX_LIST_TEXT, "text": text, "notes": len(notes)},
            )
        slices, entries = Slices(), []
        for n in notes:
            entries.append(entry(n))
            await slices.tick()
        return pn.NoteListResult(entries=entries)

    async def remove(self, p: pn.NoteRemoveParams, conn: Conn) -> pn.NoteRemoveResult:
        if not self.svc.state.settings.enabled:
            return pn.NoteRemoveResult(id=p.id, disabled=True)
        s = self.svc.state.registry.get(p.session_id)
        self.svc.state.notes.remove(Reader(s.session_id, s.reg), p.id)
        await self.svc.commit()  # refused: MeshState.forget puts the note back
        return pn.NoteRemoveResult(id=p.id, removed=True)
