"""The agent tools' handoff (SPEC §6) as a model calls it, on a real daemon
(docs/CONFORMANCE.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from tests.conftest import DaemonHandle

from meshctl import Mesh
from meshctl.agent import run

from .test_tools import Ctx


@pytest.fixture
def mesh(daemon: DaemonHandle) -> Iterator[Mesh]:
    with Mesh("test", daemon.socket, autostart=False, timeout=10) as m:
        yield m


def test_a_lone_string_for_files_or_next_steps_is_one(mesh: Mesh) -> None:
    """A model that gives ``mesh_handoff`` one file as a string (``"files": "a.py"``)
    got a handoff with one file per character (``["a", ".", "p", "y"]``)."""
    mesh.call("session.register", {"session_id": "cli:me", "task": "t"})
    me = Ctx(mesh, "cli:me", cwd="/")
    args = {"summary": "auth half done", "files": "src/auth.py", "next_steps": "run tests"}

    doc = json.loads(run(me, "mesh_handoff", args, "full"))

    assert doc["files"] == ["src/auth.py"], doc
    assert doc["next_steps"] == ["run tests"], doc
