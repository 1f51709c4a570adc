"""``s.notes``, ``s.signal(NAME)`` and ``s.once(KEY)`` on the blocking client, real daemon."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from meshctl import Mesh, Note

Daemon = Any


@pytest.fixture
def mesh(daemon: Daemon) -> Iterator[Mesh]:
    m = Mesh(socket=str(daemon.socket), autostart=False)
    yield m
    m.close()


class TestNotes:
    def test_a_shared_note_is_read_by_another_session_a_private_one_is_not(
        self, mesh: Mesh
    ) -> None:
        with mesh.session(task="a", session_id="lib:a") as a, mesh.session(task="b") as b:
            shared = a.notes.add("API base is /v2")
            a.notes.add("only mine", private=True)

            by_b = b.notes.list("lib:a")
            by_a = a.notes.list()

        assert isinstance(shared, Note)
        assert [n.text for n in by_b] == ["API base is /v2"]
        assert [(n.text, n.private) for n in by_a] == [
            ("API base is /v2", False),
            ("only mine", True),
        ]
