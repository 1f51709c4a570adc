"""One ``Mesh`` shared by threads: a call that waits does not hold up the others.

Hermes runs its hooks on several threads with one Mesh; a claim that queues, an ask,
a signal wait must not stop a heartbeat -- nor the very call that would end the
wait (the release it waits for, the answer to the question being asked). Each test
here ends the waiting call through the *same* Mesh while it waits, so a Mesh that
serialises calls fails the test (the wait runs out first), whatever the timing.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from tests.support import wait_for

from meshctl import AsyncMesh, Mesh, MeshProtocolError, MeshTimeout
from meshctl._blocking import Connection

WAIT = 60.0
"""Seconds the waiting call may wait: long enough for any loaded machine, and a
serialising Mesh makes the other call wait all of it (the test then fails)."""


class Background:
    """Run ``fn`` on a thread; :meth:`result` joins it and returns (or raises) its outcome."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.value = fn()
        except BaseException as exc:
            self.error = exc

    def result(self) -> Any:
        self.thread.join(WAIT + 30)
        assert not self.thread.is_alive(), "the waiting call never returned"
        if self.error is not None:
            raise self.error
        return self.value


def register(mesh: Mesh, sid: str) -> str:
    mesh.call("session.register", {"session_id": sid, "liveness": "heartbeat", "task": sid})
    return sid


def queued(observer: Mesh, sid: str) -> bool:
    listing = observer.call("claim.list")
    return any(w["session_id"] == sid for w in listing.get("waiting", []))


def test_a_queued_claim_does_not_hold_up_the_release_it_waits_for(daemon: Any) -> None:
    """Thread A queues for a claim on the shared Mesh; the holder's release (and a
    heartbeat) go through the same Mesh while A waits, and A is granted."""
    with Mesh(timeout=30.0) as mesh, Mesh() as observer:
        holder, waiter = register(mesh, "holder"), register(mesh, "waiter")
        mesh.call("claim.acquire", {"session_id": holder, "resources": ["res:x"]})
        a = Background(
            lambda: mesh.call(
                "claim.acquire",
                {"session_id": waiter, "resources": ["res:x"], "wait": WAIT},
                timeout=WAIT + 10,
            )
        )
        wait_for(lambda: queued(observer, waiter), what="the waiter queued")

        beat = mesh.call("session.heartbeat", {"session_id": holder})
        released = mesh.call("claim.release", {"session_id": holder})

        got = a.result()
    assert beat["ok"] is True
    assert released["released"] == ["res:x"]
    assert got["status"] == "granted"


def test_a_nested_ask_on_a_shared_mesh_gets_the_live_answer(daemon: Any) -> None:
    """An ask waits on the shared Mesh; the responder answers through the same Mesh."""
    with Mesh() as mesh:
        asker, target = register(mesh, "asker"), register(mesh, "target")
        with Connection.like(mesh) as live:
            live.call("query.respond", {"session_id": target})

            def respond() -> Any:
                while (event := live.next_event(WAIT)) is not None:
                    if event.get("kind") == "query":
                        query_id = event["id"]
                        return mesh.call(
                            "query.answer",
                            {"session_id": target, "query_id": query_id, "text": "tests pass"},
                        )
                return None

            responder = Background(respond)
            answer = mesh.call(
                "query.ask",
                {"session_id": asker, "to": target, "question": "status?", "timeout": WAIT},
                timeout=WAIT + 10,
            )
            answered = responder.result()
    assert answered is not None
    assert answer["answer"] == "tests pass"
    assert answer["answered_by"] == "session"
    assert not answer.get("timed_out")


def test_a_session_heartbeats_while_one_of_its_claims_waits(daemon: Any) -> None:
    """``Session.claim(wait=…)`` on one thread does not block ``Session.heartbeat`` on
    another, nor the release of the holder through the same Mesh."""
    with Mesh() as mesh, Mesh() as observer:
        holder = register(mesh, "holder")
        mesh.call("claim.acquire", {"session_id": holder, "resources": ["res:y"]})
        with mesh.session(task="waits", heartbeat_interval=3600) as s:
            a = Background(lambda: s.claim("res:y", wait=WAIT))
            wait_for(lambda: queued(observer, str(s.session_id)), what="the claim queued")

            beat = s.heartbeat(status="blocked")
            mesh.call("claim.release", {"session_id": holder})

            claim = a.result()
            assert claim.granted
            claim.release()
    assert beat is not None


@pytest.mark.anyio
async def test_async_mesh_serves_other_tasks_while_a_claim_queues(daemon: Any) -> None:
    """AsyncMesh already matched replies by id (a reader task): the same scenario on
    tasks, to keep it so."""
    async with AsyncMesh() as mesh, AsyncMesh() as observer:
        for sid in ("holder", "waiter"):
            await mesh.call("session.register", {"session_id": sid, "task": sid})
        await mesh.call("claim.acquire", {"session_id": "holder", "resources": ["res:z"]})
        got: dict[str, Any] = {}

        async def wait_for_it() -> None:
            got.update(
                await mesh.call(
                    "claim.acquire",
                    {"session_id": "waiter", "resources": ["res:z"], "wait": WAIT},
                    timeout=WAIT + 10,
                )
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_for_it)
            with anyio.fail_after(30):
                while not any(
                    w["session_id"] == "waiter"
                    for w in (await observer.call("claim.list")).get("waiting", [])
                ):
                    await anyio.sleep(0.02)
            await mesh.call("session.heartbeat", {"session_id": "holder"})
            await mesh.call("claim.release", {"session_id": "holder"})
    assert got["status"] == "granted"


def test_a_child_forked_while_a_parent_thread_held_the_mesh_lock_can_call(daemon: Any) -> None:
    """A fork copies a lock held by another thread of the parent (say, one connecting)
    as held, and nobody in the child releases it: the child's first call replaces the
    Mesh's lock and drops the parent's connection without taking its locks."""
    mesh = Mesh(autostart=False)
    mesh.ping()
    conn = mesh._conn
    assert conn is not None
    with mesh._lock, conn._state:  # as if another thread were connecting or routing
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            code = 1
            try:
                # a deadlocked child dies of the alarm instead of hanging the test
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                signal.alarm(30)
                code = 0 if mesh.ping()["pong"] else 1
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    pong = mesh.ping()
    mesh.close()

    assert os.waitstatus_to_exitcode(status) == 0
    assert pong["pong"] is True


def test_many_threads_each_get_their_own_replies_among_waits(daemon: Any) -> None:
    """Eight threads on one Mesh, each asking about its own session between short waits
    (signal waits that run out, so readers come and go): every reply is the asker's."""
    threads, rounds = 8, 40
    with Mesh(timeout=30.0) as mesh:
        sids = [register(mesh, f"t{i}") for i in range(threads)]
        wrong: list[tuple[str, Any]] = []

        def work(sid: str) -> None:
            for r in range(rounds):
                if r % 4 == 0:
                    got = mesh.call("signal.wait", {"name": f"never-{sid}", "timeout": 0.02})
                    if got.get("received"):
                        wrong.append((sid, got))
                info = mesh.call("session.get", {"session_id": sid})
                if info.get("session_id") != sid:
                    wrong.append((sid, info))

        workers = [Background(functools.partial(work, sid)) for sid in sids]
        for w in workers:
            w.result()
    assert wrong == []


def holds(observer: Mesh, sid: str, resource: str) -> bool:
    listing = observer.call("claim.list", {"session_id": sid})
    return any(c["resource"] == resource for c in listing.get("claims", []))


def test_a_call_that_times_out_abandons_only_its_own_reply(daemon: Any) -> None:
    """A call that times out gives up its own reply, not the connection: another
    thread's call waiting on the same Mesh carries on and gets its own reply, calls
    before and after go through, and the timed-out call's late reply (a grant the
    daemon made after the caller gave up) is read and dropped, given to nobody."""
    with Mesh(timeout=30.0) as mesh, Mesh() as observer:
        for sid in ("h1", "h2", "a", "b"):
            register(observer, sid)
        observer.call("claim.acquire", {"session_id": "h1", "resources": ["res:one"]})
        observer.call("claim.acquire", {"session_id": "h2", "resources": ["res:two"]})
        before = mesh.ping()
        first = mesh._conn
        b = Background(
            lambda: mesh.call(
                "claim.acquire",
                {"session_id": "b", "resources": ["res:two"], "wait": WAIT},
                timeout=WAIT + 10,
            )
        )
        wait_for(lambda: queued(observer, "b"), what="b's wait sent on the shared Mesh")
        with pytest.raises(MeshTimeout):
            mesh.call(
                "claim.acquire",
                {"session_id": "a", "resources": ["res:one"], "wait": WAIT},
                timeout=0.3,
            )
        during = mesh.ping()
        observer.call("claim.release", {"session_id": "h1"})  # a's late grant is sent
        wait_for(lambda: holds(observer, "a", "res:one"), what="a granted after it gave up")
        after = mesh.ping()  # read past the late reply
        observer.call("claim.release", {"session_id": "h2"})
        got = b.result()
        kept = mesh._conn is first
        abandoned = first is not None and first._pending
    assert (before["pong"], during["pong"], after["pong"]) == (True, True, True)
    assert got["status"] == "granted"
    assert [c["resource"] for c in got["claims"]] == ["res:two"]  # its own, not a's
    assert kept  # nothing was closed
    assert not abandoned  # the late reply was dropped, the id forgotten


def test_a_timeout_failing_open_leaves_the_other_threads_calls_alone(
    daemon: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With ``fail_open`` a call that times out still returns None and the Mesh degrades
    (SPEC §10: a hung daemon is as unavailable as a missing one), but another thread's
    call already waiting gets its reply; once the backoff is over, calls go through
    the same connection again and the Mesh says it is reachable again."""
    with Mesh(fail_open=True) as mesh, Mesh() as observer:
        for sid in ("h2", "a", "b"):
            register(observer, sid)
        observer.call("claim.acquire", {"session_id": "h2", "resources": ["res:two"]})
        observer.call("claim.acquire", {"session_id": "h2", "resources": ["res:one"]})
        mesh.ping()
        first = mesh._conn
        b = Background(
            lambda: mesh.call(
                "claim.acquire",
                {"session_id": "b", "resources": ["res:two"], "wait": WAIT},
                timeout=WAIT + 10,
            )
        )
        wait_for(lambda: queued(observer, "b"), what="b's wait sent on the shared Mesh")
        with caplog.at_level(logging.WARNING, "meshctl"):
            timed_out = mesh.call(
                "claim.acquire",
                {"session_id": "a", "resources": ["res:one"], "wait": WAIT},
                timeout=0.3,
            )
            observer.call("claim.release", {"session_id": "h2", "resources": ["res:two"]})
            got = b.result()
            wait_for(lambda: mesh.ping() is not None, what="calls go through again")
        kept = mesh._conn is first
    assert timed_out is None
    assert got["status"] == "granted"
    assert kept
    assert "continuing without it (fail_open)" in caplog.text
    assert "reachable again" in caplog.text


@pytest.mark.anyio
async def test_async_mesh_failing_open_is_reachable_again_after_a_timeout(
    daemon: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """AsyncMesh gives up a timed-out call's reply only, as Mesh now does; failing open
    it degrades, and says it is reachable again once a call goes through on the
    connection it kept (before, it stayed degraded: only a new connection said so)."""
    async with AsyncMesh(fail_open=True) as mesh:
        await mesh.call("session.register", {"session_id": "h", "task": "h"})
        await mesh.call("session.register", {"session_id": "a", "task": "a"})
        await mesh.call("claim.acquire", {"session_id": "h", "resources": ["res:q"]})
        with caplog.at_level(logging.WARNING, "meshctl"):
            timed_out = await mesh.call(
                "claim.acquire",
                {"session_id": "a", "resources": ["res:q"], "wait": WAIT},
                timeout=0.3,
            )
            with anyio.fail_after(30):
                while await mesh.call("mesh.ping") is None:
                    await anyio.sleep(0.05)
    assert timed_out is None
    assert "continuing without it (fail_open)" in caplog.text
    assert "reachable again" in caplog.text


def test_a_reply_read_while_another_thread_closes_is_still_returned(daemon: Any) -> None:
    """Another thread's ``close()`` (or its timeout) can clear the pending table between
    the reader getting its own reply and taking it off that table: the call returns
    the reply it has -- it was answered -- instead of a raw KeyError. The interleaving
    is made certain by closing from inside the read, right after the reply is in."""
    with Mesh() as mesh:
        mesh.ping()
        conn = mesh._conn
        assert conn is not None
        receive = conn._receive

        def receive_then_close(deadline: float) -> Any:
            msg = receive(deadline)
            conn.close("closed by another thread")
            return msg

        conn._receive = receive_then_close  # type: ignore[method-assign]
        pong = conn.exchange("mesh.ping", None, 5.0).unwrap()
        conn._receive = receive  # type: ignore[method-assign]
        assert pong["pong"] is True
        assert mesh.ping()["pong"] is True  # and the next call opens a new connection


@pytest.fixture
def unreadable_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the client write NaN (as Python's json does by default, and as our clients did
    before they refused it): the one way to put a frame the daemon cannot read on a
    connection our client shares, which these tests are about."""
    import json

    from meshctl import _conn

    loose = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    monkeypatch.setattr(_conn, "encode_value", loose)


@pytest.mark.usefixtures("unreadable_nan")
def test_an_error_without_an_id_fails_every_waiting_call_not_the_oldest(daemon: Any) -> None:
    """A request the daemon cannot read (NaN is not JSON) is answered with a parse error
    whose id is null (JSON-RPC 2.0): which call it answers cannot be told. It went to
    the oldest waiting call -- another thread's queued claim failed with "Parse error"
    while the unreadable call waited for its timeout. Now every call waiting on the
    connection fails with MeshProtocolError saying so, the connection is given up (the
    daemon withdraws the claim's wait with it) and the next call opens a new one."""
    with Mesh(timeout=30.0) as mesh, Mesh() as observer:
        for sid in ("holder", "waiter"):
            register(observer, sid)
        observer.call("claim.acquire", {"session_id": "holder", "resources": ["res:x"]})
        first = mesh._conn
        a = Background(
            lambda: mesh.call(
                "claim.acquire",
                {"session_id": "waiter", "resources": ["res:x"], "wait": WAIT},
                timeout=WAIT + 10,
            )
        )
        wait_for(lambda: queued(observer, "waiter"), what="the claim queued on the shared Mesh")
        with pytest.raises(MeshProtocolError) as unreadable:
            mesh.call("session.heartbeat", {"session_id": "holder", "x": float("nan")})
        with pytest.raises(MeshProtocolError) as other:
            a.result()
        wait_for(lambda: not queued(observer, "waiter"), what="the wait withdrawn")
        pong = mesh.ping()
        replaced = mesh._conn is not first
    assert unreadable.value.data["daemon_code"] == "PARSE_ERROR"
    assert other.value is unreadable.value or other.value.data == unreadable.value.data
    assert pong["pong"] is True
    assert replaced


@pytest.mark.anyio
@pytest.mark.usefixtures("unreadable_nan")
async def test_async_mesh_fails_every_waiting_call_on_an_error_without_an_id(daemon: Any) -> None:
    """The same for AsyncMesh's tasks: the unreadable call and the queued claim both
    fail with MeshProtocolError, and the next call goes through on a new connection."""
    errors: list[BaseException] = []
    async with AsyncMesh(timeout=30.0) as mesh, AsyncMesh() as observer:
        for sid in ("holder", "waiter"):
            await observer.call("session.register", {"session_id": sid, "task": sid})
        await observer.call("claim.acquire", {"session_id": "holder", "resources": ["res:n"]})

        async def waits() -> None:
            try:
                await mesh.call(
                    "claim.acquire",
                    {"session_id": "waiter", "resources": ["res:n"], "wait": WAIT},
                    timeout=WAIT + 10,
                )
            except MeshProtocolError as exc:
                errors.append(exc)

        async def queued_now() -> bool:
            listing = await observer.call("claim.list")
            return any(w["session_id"] == "waiter" for w in listing.get("waiting", []))

        async with anyio.create_task_group() as tg:
            tg.start_soon(waits)
            with anyio.fail_after(30):
                while not await queued_now():
                    await anyio.sleep(0.02)
            with pytest.raises(MeshProtocolError) as unreadable:
                await mesh.call("session.heartbeat", {"session_id": "holder", "x": float("nan")})
        with anyio.fail_after(30):
            while await queued_now():
                await anyio.sleep(0.02)
        pong = await mesh.ping()
    assert unreadable.value.data["daemon_code"] == "PARSE_ERROR"
    assert len(errors) == 1
    assert pong["pong"] is True
