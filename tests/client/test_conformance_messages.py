"""Conformance of SPEC §10's messaging surface against a real daemon: each test a defect
found by using the library as a user would (docs/CONFORMANCE.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from meshctl import AsyncMesh, Mesh

Daemon = Any


@pytest.fixture
def mesh(daemon: Daemon) -> Iterator[Mesh]:
    with Mesh(socket=daemon.socket, autostart=False) as m:
        yield m


def test_one_file_or_step_given_as_a_string_is_one(mesh: Mesh) -> None:
    """``s.handoff("…", files="src/auth.py", next_steps="run the tests")`` stored the
    handoff with one file per character (``("s", "r", "c", …)``): a string is a
    sequence of strings. A lone string is now taken as the one file (or step) it names."""
    with mesh.session(task="writer") as s:
        h = s.handoff("auth half done", files="src/auth.py", next_steps="run the tests")
        assert h is not None
        assert h.files == ("src/auth.py",)
        assert h.next_steps == ("run the tests",)
        again = s.handoff("more", files=["a.py", "b.py"], next_steps=("x", "y"))
        assert again is not None
        assert (again.files, again.next_steps) == (("a.py", "b.py"), ("x", "y"))


@pytest.mark.anyio
async def test_the_async_session_takes_a_lone_string_as_one_too(daemon: Daemon) -> None:
    async with (
        AsyncMesh(socket=daemon.socket, autostart=False) as m,
        m.session(task="writer") as s,
    ):
        h = await s.handoff("auth half done", files="src/auth.py", next_steps="tests")
    assert h is not None
    assert (h.files, h.next_steps) == (("src/auth.py",), ("tests",))
