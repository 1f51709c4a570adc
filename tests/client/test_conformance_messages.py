"""Conformance of SPEC §10's messaging surface against a real daemon: each test a defect
found by using the library as a user would (docs/CONFORMANCE.md)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support import PATIENCE, wait_for

from meshctl import AsyncMesh, Mesh, NoSession, SessionExpired

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


def test_a_claim_of_an_ended_or_unstarted_session_is_refused_not_granted(mesh: Mesh) -> None:
    """``s.claim(…)`` on a session that was ended (``end()``, or after its ``with``
    block) or never started answered ``granted`` with a handle that guards nothing --
    the no-op meant for a mesh switched off or unreachable with ``fail_open`` -- so the
    caller went on as if it held the key while anyone could take it. It raises:
    ``SessionExpired`` (ended), ``NoSession`` (not started)."""
    with mesh.session(task="done soon") as s:
        pass
    with pytest.raises(SessionExpired, match="was ended"):
        s.claim("res:db")
    never = mesh.session(task="never started")
    with pytest.raises(NoSession, match="not started"):
        never.claim("res:db")

    with mesh.session(task="other") as other, other.claim("res:db") as c:
        assert c.granted, "nobody holds res:db"
        assert c.guarded


@pytest.mark.anyio
async def test_an_ended_async_session_s_claim_is_refused_too(daemon: Daemon) -> None:
    async with AsyncMesh(socket=daemon.socket, autostart=False) as m:
        async with m.session(task="done soon") as s:
            pass
        with pytest.raises(SessionExpired, match="was ended"):
            await s.claim("res:db")


def test_once_of_an_ended_or_unstarted_session_says_so(mesh: Mesh) -> None:
    """``with s.once(KEY)`` on such a session refused (it never fails open) but said "the
    mesh is unreachable; not running", sending the caller after the daemon."""
    with mesh.session(task="done soon") as s:
        pass
    with pytest.raises(SessionExpired, match="was ended"), s.once("report:1"):
        pytest.fail("never runs")
    never = mesh.session(task="never started")
    with pytest.raises(NoSession, match="not started"), never.once("report:1"):
        pytest.fail("never runs")


def test_messaging_on_an_ended_session_is_refused(mesh: Mesh) -> None:
    """``send``, ``ask``, ``inbox``, ``broadcast``, ``handoff`` … on a session that was
    ended returned None (or nothing) as if the mesh were switched off: a message the
    caller believed sent was never sent. They raise ``SessionExpired``, as ``claim``
    does. A session not started yet stays a no-op for them (``test_messaging.py``'s
    ``test_not_started_is_a_no_op``)."""
    with mesh.session(task="peer") as peer, mesh.session(task="done soon") as s:
        pass
    calls = [
        lambda x: x.send(str(peer.session_id), "hello"),
        lambda x: x.ask(str(peer.session_id), "what now?"),
        lambda x: x.inbox(),
        lambda x: x.broadcast("deploying"),
        lambda x: x.handoff("half done"),
    ]
    for call in calls:
        with pytest.raises(SessionExpired, match="was ended"):
            call(s)


def test_events_stop_when_the_session_ends(mesh: Mesh) -> None:
    """SPEC §10: ``for event in s.events()`` -- iterating went on waiting for ever once the
    session had ended (``s.end()`` from another thread or task, the end of its block):
    no event can come for it any more. The iteration now stops (after the events that
    came), as ``meshctl inbox --follow`` does when its session ends."""
    with mesh.session(task="peer") as peer:
        s = mesh.session(task="listener").start()
        got: list[str] = []
        events = s.events()

        def listen() -> None:
            for event in events:
                got.append(str(event.get("kind")))

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()

        def pushed() -> bool:  # sent once the listener has subscribed (then it is pushed)
            sent = peer.send(str(s.session_id), "hello")
            return sent is not None and sent.state == "delivered"

        wait_for(pushed, interval=0.2, what="a message pushed to the listener")
        wait_for(lambda: got, what="the listener to take it")
        s.end()  # from another thread than the one iterating

        listener.join(PATIENCE)
        assert not listener.is_alive(), "the iteration stopped"
        assert set(got) == {"message"}, got  # a message sent while it subscribed may come too
