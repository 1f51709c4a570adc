"""``s.notes``, ``s.signal(NAME)`` and ``s.once(KEY)`` on the blocking client, real daemon."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from meshctl import Mesh, MeshUnavailable, Note, SignalRecord

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


class TestSignal:
    def test_emit_and_a_late_wait(self, mesh: Mesh) -> None:
        with mesh.session(task="a") as a, mesh.session(task="b") as b:
            sent = a.signal("data-ready").emit({"rows": 10})
            got = b.signal("data-ready").wait(timeout=5)
            none = b.signal("data-ready").wait(after=1, timeout=0.1)

        assert sent is not None
        assert got is not None
        assert got == SignalRecord("data-ready", 1, {"rows": 10}, a.session_id, got.emitted_at)
        assert none is None

    def test_a_wait_longer_than_the_client_timeout_is_not_cut_short(self, daemon: Daemon) -> None:
        """The reply may come after Mesh.timeout: the call waits for the wait."""
        m = Mesh(socket=str(daemon.socket), autostart=False, timeout=0.2)
        with m.session(task="w") as s:
            got = s.signal("late").wait(timeout=0.6)
        m.close()

        assert got is None


class TestOnce:
    def test_first_runs_the_second_does_not(self, mesh: Mesh) -> None:
        ran = []
        with mesh.session(task="a") as a, mesh.session(task="b") as b:
            with a.once("finance-daily:2026-11-30") as first:
                if first:
                    ran.append("a")
                with b.once("finance-daily:2026-11-30") as also:
                    if also:
                        ran.append("b")
            with b.once("finance-daily:2026-11-30") as after:
                if after:
                    ran.append("b")
            state = a.once("finance-daily:2026-11-30")
            with state as again:
                pass

        assert ran == ["a"]
        assert again is False
        assert state.status == "done"

    def test_an_exception_frees_the_key(self, mesh: Mesh) -> None:
        def send_report(s: Any) -> None:
            with s.once("k") as first:
                assert first
                raise RuntimeError("send failed")

        with mesh.session(task="a") as a:
            with pytest.raises(RuntimeError):
                send_report(a)
            with a.once("k") as again:
                pass

        assert again is True

    def test_unreachable_never_fails_open(self, mesh_env: Any) -> None:
        m = Mesh(socket=str(mesh_env.socket), autostart=False, fail_open=True)
        s = m.session(task="x").start()
        ran = []

        with pytest.raises(MeshUnavailable), s.once("k") as first:
            ran.append(first)
        s.end()
        m.close()

        assert ran == []
