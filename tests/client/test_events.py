"""Typed events: the daemon's msgspec Structs and the clients' standard-library mirror agree.

Statically, field by field for every kind; and live, through the real daemon: a
scenario makes it push every kind it can to one session, and each event is decoded
by the msgspec union (what the daemon encoded from) and by the mirror, in the
blocking client and in the async one.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from tests.support import wait_for

from meshctl import AsyncMesh, Mesh, _events
from meshctl._async.events import AsyncSessionEvents as SessionEvents
from meshctl._blocking import Connection
from meshd.protocol import events as pe

#: Pushed to no subscriber today: board notices become ``file.changed`` for a
#: subscribed session and inbox items only for one that is not, and claim losses
#: travel as ``claim.*`` events that carry their inbox item.
NOT_PUSHED_LIVE = {"notice"}
#: Pushed to ``mesh.watch`` connections, never to a session (tested on its own).
WATCH_ONLY = {"mesh.changed"}


def wire_fields(cls: type[msgspec.Struct]) -> dict[str, bool]:
    """Encoded field name -> required, for a Struct (``kind`` is its tag)."""
    out = {f.encode_name: f.required for f in msgspec.structs.fields(cls)}
    return {"kind": True, **out}


def mirror_fields(cls: Any) -> dict[str, bool]:
    names = {n: n not in cls._field_defaults for n in cls._fields}
    return {("from" if n == "from_" else n): req for n, req in names.items()}


class TestMirror:
    def test_every_kind_is_mirrored(self) -> None:
        assert set(_events.KINDS) == set(pe.EVENTS)

    @pytest.mark.parametrize("kind", sorted(pe.EVENTS))
    def test_fields_agree(self, kind: str) -> None:
        """Same names, and a field the daemon may leave out is optional in the mirror."""
        assert mirror_fields(_events.KINDS[kind]) == wire_fields(pe.EVENTS[kind])

    def test_wrong_shapes_are_refused(self) -> None:
        from meshctl import MeshError

        bad: Any
        for bad in (
            [],
            {"kind": "no.such"},
            {"kind": "claim.lost", "session_id": "a"},
            {"kind": "claim.lost", "session_id": "a", "resources": "x", "token": 1, "at": ""},
        ):
            with pytest.raises(MeshError):
                _events.decode(bad)


def emit_everything(daemon: Any, tree: Path, child: subprocess.Popen[bytes]) -> None:
    """Make the daemon push every kind it can to session ``a`` (subscribed by the caller).

    ``a`` lives as long as ``child``; it is killed last, so ``a``'s claim is lost.
    """
    call = daemon.call

    def ok(method: str, **params: Any) -> Any:
        reply = call(method, params)
        assert "result" in reply, reply
        return reply["result"]

    ok("session.register", session_id="b", cwd=str(tree))
    ok("message.send", session_id="b", to="a", text="hello")
    ok("broadcast.send", session_id="b", text="to all")
    ok("handoff.write", session_id="b", to="a", summary="yours now")
    ok("session.register", session_id="c")
    ok("query.ask", session_id="c", to="a", question="status?", timeout=0.2)  # -> query
    # a late answer from b's live responder -> answer
    responder = Connection(daemon.profile, daemon.socket, autostart=False)
    responder.call("query.respond", {"session_id": "b"})
    asking = threading.Thread(
        target=lambda: call(
            "query.ask", {"session_id": "a", "to": "b", "question": "?", "timeout": 0.2}
        )
    )
    asking.start()
    query = responder.next_event(10)
    asking.join()
    assert query is not None
    responder.call("query.answer", {"session_id": "b", "query_id": query["id"], "text": "late"})
    responder.close()
    # a wait granted -> claim.granted; a steal -> claim.stolen; a ttl -> claim.expired;
    # a release -> claim.released
    ok("claim.acquire", session_id="b", resources=["res:g"])
    waiting = threading.Thread(
        target=lambda: call(
            "claim.acquire", {"session_id": "a", "resources": ["res:g"], "wait": 10}
        )
    )
    waiting.start()
    wait_for(lambda: ok("mesh.info")["counts"]["waiters"])
    ok("claim.release", session_id="b", resources=["res:g"])
    waiting.join()
    ok("claim.acquire", session_id="a", resources=["res:s"])
    ok("claim.steal", session_id="b", resources=["res:s"], reason="mine")
    ok("claim.acquire", session_id="a", resources=["res:r"])
    ok("claim.release", session_id="a", resources=["res:r"])  # -> claim.released
    ok("claim.acquire", session_id="a", resources=["res:t"], ttl=0.2)
    ok("board.changed", session_id="b", paths=[str(tree / "f.py")])  # -> file.changed
    wait_for(
        lambda: all(c["resource"] != "res:t" for c in ok("claim.list", session_id="a")["claims"])
    )
    # b out-ranks a and preempts its claim -> preempt; a out-ranks c and preempts
    # c's, whose grace runs out -> preempt.expired
    Path(daemon.env["MESH_CONFIG"]).write_text("[defaults]\npreempt_grace = 0.2\n")
    assert ok("mesh.reload")["reloaded"]
    ok("session.prioritize", session_id="b", rank=2)
    ok("claim.acquire", session_id="a", resources=["res:p"])
    ok("claim.preempt", session_id="b", resources=["res:p"], reason="mine")
    ok("session.prioritize", session_id="a", rank=5)
    ok("claim.acquire", session_id="c", resources=["res:q"])
    ok("claim.preempt", session_id="a", resources=["res:q"])
    wait_for(
        lambda: any(
            "grace of your preemption ran out" in i["text"]
            for i in ok("message.inbox", session_id="a", peek=True, all=True)["items"]
        )
    )
    ok("claim.acquire", session_id="a", resources=["res:l"])
    child.kill()  # a's process dies -> claim.lost
    child.wait()


def check(raw: dict[str, Any]) -> str:
    """Decode one event both ways; they must agree on every field. Its kind."""
    typed = msgspec.convert(raw, pe.Event)
    mirrored = _events.decode(raw)
    theirs = msgspec.to_builtins(typed)
    mine = {("from" if k == "from_" else k): v for k, v in mirrored._asdict().items()}
    mine = {k: list(v) if isinstance(v, tuple) else v for k, v in mine.items()}
    assert mine == theirs
    return str(raw["kind"])


@pytest.fixture
def scene(daemon: Any, short_tmp: Path) -> Any:
    tree = short_tmp / "proj"
    tree.mkdir()
    child = subprocess.Popen(["sleep", "600"])
    reply = daemon.call(
        "session.register",
        {"session_id": "a", "cwd": str(tree), "liveness": "process", "pid": child.pid},
    )
    assert "result" in reply, reply
    yield daemon, tree, child
    child.kill()
    child.wait()


EXPECTED = set(pe.EVENTS) - NOT_PUSHED_LIVE - WATCH_ONLY


def test_blocking_client_decodes_every_event(scene: Any) -> None:
    daemon, tree, child = scene
    listener = Connection.like(Mesh(autostart=False))
    listener.call("events.subscribe", {"session_id": "a"})
    listener.call("query.respond", {"session_id": "a"})
    emit_everything(daemon, tree, child)
    seen: set[str] = set()
    deadline = time.monotonic() + 60
    while seen != EXPECTED and time.monotonic() < deadline:
        if (event := listener.next_event(0.5)) is not None:
            seen.add(check(event))
    listener.close()

    assert seen == EXPECTED


@pytest.mark.anyio
async def test_async_client_decodes_every_event(scene: Any) -> None:
    """The async client's subscription (no responder: ``query`` goes only to responders)."""
    daemon, tree, child = scene
    expected = EXPECTED - {"query"}
    seen: set[str] = set()
    async with AsyncMesh(autostart=False) as mesh:
        events = SessionEvents(mesh, "a")
        async with events:
            await events._subscribe()
            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, emit_everything, daemon, tree, child)
                with anyio.move_on_after(60):
                    async for event in events:
                        seen.add(check(event))
                        if seen == expected:
                            break

    assert seen == expected


def test_watch_feed_decodes(daemon: Any) -> None:
    """A ``mesh.watch`` connection gets ``mesh.changed`` naming what changed."""
    listener = Connection.like(Mesh(autostart=False))
    listener.call("mesh.watch")
    reply = daemon.call("session.register", {"session_id": "w"})
    assert "result" in reply, reply

    event = listener.next_event(10)
    listener.close()

    assert event is not None
    assert check(event) == "mesh.changed"
    assert "session" in event["what"]


def test_blocking_session_events_yields_pushed_events(daemon: Any) -> None:
    """``Session.events()``, the blocking twin of ``AsyncSession.events()`` (one source
    for both sessions; the blocking Session had none), yields the session's pushed
    events from a connection of its own, and closes it on leaving the block."""
    with Mesh() as mesh, mesh.session(task="a") as a, mesh.session(task="b") as b:
        with a.events() as events:
            events._subscribe()  # subscribed before the send, so the message is pushed
            sent = b.send(a.session_id, "hello")
            event = next(iter(events))
        closed = events._conn is None

    assert sent is not None
    assert (event["kind"], event["text"], event["id"]) == ("message", "hello", sent.id)
    assert closed
