"""Scenario tables through both drivers of the session core (``Session``,
``AsyncSession``): the same grants, holders, releases and losses, in the same words;
the same messages, answers, broadcasts, handoffs and notes; the same no-ops when the
daemon is unreachable and the caller fails open."""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from meshctl import AsyncMesh, Mesh

#: (name, what the other session does to the claim, whether it is lost, words in the loss)
SCENARIOS = [
    ("kept", None, False, ""),
    ("ttl", "ttl", True, "expired: its ttl ran out"),
    ("steal", "steal", True, "was stolen by other — hotfix"),
]


def steal(daemon: Any, key: str) -> None:
    reply = daemon.call(
        "claim.steal", {"session_id": "other", "resources": [key], "reason": "hotfix"}
    )
    assert "result" in reply, reply


@pytest.fixture
def other(daemon: Any) -> Any:
    assert "result" in daemon.call("session.register", {"session_id": "other"})
    return daemon


@pytest.mark.parametrize(("name", "action", "lost", "words"), SCENARIOS)
def test_blocking(other: Any, name: str, action: str | None, lost: bool, words: str) -> None:
    key = f"res:{name}"
    seen: list[str] = []
    with Mesh() as mesh, mesh.session(task="t", on_lost=seen.append) as s:
        c = s.claim(key, ttl=0.2 if action == "ttl" else None)
        held = s.check(key)
        if action == "steal":
            steal(other, key)
        deadline = time.monotonic() + 60
        while lost and not c.lost and time.monotonic() < deadline:
            time.sleep(0.02)
        result = (c.granted, c.lost, bool(held.get("claims")))
        released = c.release()

    assert result == (True, lost, False)  # its own claim is not "other" to itself
    assert released == ([] if lost else [key])
    assert (words in seen[0]) if lost else seen == []


@pytest.mark.anyio
@pytest.mark.parametrize(("name", "action", "lost", "words"), SCENARIOS)
async def test_async(other: Any, name: str, action: str | None, lost: bool, words: str) -> None:
    key = f"res:{name}"
    seen: list[str] = []
    async with AsyncMesh() as mesh, mesh.session(task="t", on_lost=seen.append) as s:
        c = await s.claim(key, ttl=0.2 if action == "ttl" else None)
        held = await s.check(key)
        if action == "steal":
            await anyio.to_thread.run_sync(steal, other, key)
        with anyio.move_on_after(60):
            while lost and not c.lost:
                await anyio.sleep(0.02)
        result = (c.granted, c.lost, bool(held.get("claims")))
        released = await c.release()

    assert result == (True, lost, False)
    assert released == ([] if lost else [key])
    assert (words in seen[0]) if lost else seen == []


# --- the session surface (SPEC §10): one scenario table, both drivers -----------------


async def do(value: Any) -> Any:
    """A session method's result, whichever driver made it (awaited when async)."""
    return await value if inspect.isawaitable(value) else value


async def send_and_read(a: Any, b: Any) -> Any:
    sent = await do(a.send("b", "hello"))
    items = await do(b.inbox())
    acked = await do(b.ack([i.id for i in items]))
    return (sent.to, [(i.from_, i.kind, i.text) for i in items], len(acked),
            await do(b.inbox()), await do(a.message_states([sent.id])))  # fmt: skip


async def ask_status(a: Any, b: Any) -> Any:
    answer = await do(a.ask("b", "what are you doing?", timeout=2))
    return (answer.answered_by, answer.from_, "task for b" in answer.answer, answer.timed_out)


async def ask_responder(a: Any, b: Any) -> Any:
    responder = await do(b.on_query(lambda q: f"busy with {q.text}"))
    answer = await do(a.ask("b", "x", timeout=10))
    await do(responder.stop())
    return (answer.answered_by, answer.answer, responder.answered)


async def broadcast(a: Any, b: Any) -> Any:
    sent = await do(a.broadcast("deploying in 5 min"))
    items = await do(b.inbox())
    return (sent.recipients, [(i.kind, i.text) for i in items])


async def handoff(a: Any, b: Any) -> Any:
    written = await do(a.handoff("auth half done", to="b", next_steps=["add tests"]))
    listed = await do(b.handoffs())
    return (written.from_, written.to, written.next_steps, [h.summary for h in listed])


async def claim(a: Any, b: Any) -> Any:
    mine = await do(a.claim("port:7", reason="dev server"))
    theirs = await do(b.claim("port:7"))
    released = await do(mine.release())
    return (mine.granted, theirs.granted, [h["session_id"] for h in theirs.holders], released)


async def notes(a: Any, b: Any) -> Any:
    await do(a.notes.add("API base is /v2"))
    await do(a.notes.add("mine only", private=True))
    return [n.text for n in await do(b.notes.list())]


#: (scenario, what it returns through either driver)
SURFACE = [
    (send_and_read, ("b", [("a", "message", "hello")], 1, [], {1: "read"})),
    (ask_status, ("status", "b", True, False)),
    (ask_responder, ("session", "busy with x", 1)),
    (broadcast, (["b"], [("broadcast", "deploying in 5 min")])),
    (handoff, ("a", "b", ("add tests",), ["auth half done"])),
    (claim, (True, False, ["a"], ["port:7"])),
    (notes, ["API base is /v2"]),
]


@asynccontextmanager
async def two_sessions(driver: str, **mesh: Any) -> AsyncIterator[tuple[Any, Any]]:
    """Sessions ``a`` and ``b`` of the blocking or the async driver."""
    if driver == "blocking":
        with (
            Mesh(autostart=False, **mesh) as m,
            m.session("task for a", session_id="a") as a,
            m.session("task for b", session_id="b") as b,
        ):
            yield a, b
    else:
        async with (
            AsyncMesh(autostart=False, **mesh) as am,
            am.session("task for a", session_id="a") as a,
            am.session("task for b", session_id="b") as b,
        ):
            yield a, b


@pytest.mark.anyio
@pytest.mark.parametrize("driver", ["blocking", "async"])
@pytest.mark.parametrize(("scenario", "expected"), SURFACE, ids=[s.__name__ for s, _ in SURFACE])
async def test_surface(daemon: Any, driver: str, scenario: Any, expected: Any) -> None:
    """Each call of the session surface answers the same through both drivers."""
    async with two_sessions(driver) as (a, b):
        got = await scenario(a, b)

    assert got == expected


def late_answer_reply(responder: Any) -> None:
    """Hold back the responder's reply to ``query.answer`` after the daemon has taken
    the answer (and handed it to the asker): the answer is in flight when the asker
    moves on, as happens when the asker's wake-up is scheduled first."""
    conn = responder._conn
    real = conn.call
    if inspect.iscoroutinefunction(real):

        async def slow(method: str, params: Any, *args: Any, **kw: Any) -> Any:
            reply = await real(method, params, *args, **kw)
            if method == "query.answer":
                await anyio.sleep(0.3)
            return reply

    else:

        def slow(method: str, params: Any, *args: Any, **kw: Any) -> Any:  # type: ignore[misc]
            reply = real(method, params, *args, **kw)
            if method == "query.answer":
                time.sleep(0.3)
            return reply

    conn.call = slow


@pytest.mark.anyio
@pytest.mark.parametrize("driver", ["blocking", "async"])
async def test_stop_lets_the_answer_in_flight_finish(daemon: Any, driver: str) -> None:
    """Stopping a responder right after the asker got its answer still counts that
    answer: ``stop`` lets the call in flight finish instead of cancelling it."""
    async with two_sessions(driver) as (a, b):
        responder = await do(b.on_query(lambda q: f"busy with {q.text}"))
        late_answer_reply(responder)
        answer = await do(a.ask("b", "x", timeout=10))
        await do(responder.stop())

    assert (answer.answered_by, answer.answer, responder.answered) == (
        "session",
        "busy with x",
        1,
    )


async def unreachable(s: Any) -> Any:
    c = await do(s.claim("port:7"))
    responder = await do(s.on_query(lambda q: "never"))
    return (
        s.active, (c.granted, c.guarded), await do(s.send("b", "x")), await do(s.inbox()),
        await do(s.ask("b", "q")), await do(s.broadcast("x")), await do(s.handoff("h")),
        await do(s.handoffs()), responder.running, await do(s.heartbeat(task="t")),
    )  # fmt: skip


@pytest.mark.anyio
@pytest.mark.parametrize("driver", ["blocking", "async"])
async def test_fail_open(mesh_env: Any, driver: str) -> None:
    """No daemon and fail_open: every call is a no-op with the same empty answer."""
    async with two_sessions(driver, fail_open=True) as (a, _):
        got = await unreachable(a)

    assert got == (False, (True, False), None, [], None, None, None, [], False, None)


# --- a set that takes in a key the session held already --------------------------------


async def set_over_a_held_key(s: Any, other: Any, lose: bool) -> Any:
    """The session holds res:a, then claims {res:a, res:b}: res:a keeps its token, res:b
    gets the new one (SPEC §5: a held key keeps its token). The handle validates each
    key against its own token and turns lost when the kept key is stolen. (Before: it
    validated res:a against res:b's token, said False and turned lost with nothing
    lost; and a steal of res:a never made it lost.)"""
    first = await do(s.claim("res:a"))
    both = await do(s.claim("res:a", "res:b"))
    valid = await do(both.validate())
    lost_before = both.lost
    if lose:
        await anyio.to_thread.run_sync(steal, other, "res:a")
        with anyio.move_on_after(60):
            while not both.lost:
                await anyio.sleep(0.02)
    tokens = {c["resource"]: c["token"] for c in both.claims}
    return (valid, lost_before, both.lost, first.lost, tokens["res:a"] == first.token)


@pytest.mark.anyio
@pytest.mark.parametrize("lose", [False, True])
@pytest.mark.parametrize("driver", ["blocking", "async"])
async def test_a_set_over_a_held_key_keeps_each_token(other: Any, driver: str, lose: bool) -> None:
    if driver == "async":
        async with AsyncMesh() as mesh, mesh.session(task="t") as s:
            got = await set_over_a_held_key(s, other, lose)
    else:
        with Mesh() as bmesh, bmesh.session(task="t") as bs:
            got = await set_over_a_held_key(bs, other, lose)

    assert got == (True, False, lose, lose, True)
