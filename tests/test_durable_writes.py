"""The durable write path with a real store: what a request hands the writer, and when.

A real :class:`~meshd.service.Service` (every domain of ``app.wire``) over a real
SQLite file and its writer thread; handlers are called directly, without a socket.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from tests.support import profile_paths

from meshd.app import wire
from meshd.core.clock import ManualClock
from meshd.core.settings import Settings
from meshd.core.state import MeshState
from meshd.service import Conn, Service
from meshd.store import Store


@pytest.fixture
async def svc(short_tmp: Path) -> AsyncIterator[Service]:
    root = short_tmp
    paths = profile_paths(root)
    store = Store(paths.database)
    await anyio.to_thread.run_sync(store.open)
    service = Service(MeshState(ManualClock(), Settings(), "test"), store, paths, domains=wire)
    store.start()
    try:
        yield service
    finally:
        await store.flush()
        store.stop()
        store.close()


async def call(svc: Service, method: str, params: dict[str, Any]) -> Any:
    h = svc.handlers[method]
    p = h.decode(msgspec.json.encode(params))
    return await h.fn(p, Conn(1)) if h.is_async else h.fn(p, Conn(1))


async def test_an_end_is_written_once(svc: Service) -> None:
    """session.end commits the end before applying it; applying it must not queue
    the same end again for the writer (it did: every end cost two writes)."""
    await call(svc, "session.register", {"session_id": "cli:a", "source": "cli", "task": "t"})
    await call(svc, "session.end", {"session_id": "cli:a"})
    await svc.store.flush()

    assert svc.store.writes == 2  # the session's put, then its end
    db = sqlite3.connect(svc.store.path)
    assert db.execute("SELECT end_reason FROM sessions").fetchall() == [("ended",)]


async def test_an_end_still_releases_and_logs_what_it_held(svc: Service) -> None:
    """What the end sets off (its claims' release records) is still written."""
    await call(svc, "session.register", {"session_id": "cli:a", "source": "cli", "task": "t"})
    await call(svc, "claim.acquire", {"session_id": "cli:a", "resources": ["res:x"]})
    await call(svc, "session.end", {"session_id": "cli:a"})
    await svc.store.flush()

    db = sqlite3.connect(svc.store.path)
    actions = [a for (a,) in db.execute("SELECT action FROM audit ORDER BY rowid")]
    assert actions == ["grant", "release"]
    assert db.execute("SELECT count(*) FROM claims").fetchone() == (0,)


async def test_an_end_stored_alone_takes_its_claims_rows_with_it(svc: Service) -> None:
    """The end is acknowledged once stored; its releases follow in the background, and
    a kill -9 may come between. The end alone must leave no claim row behind: the
    same id registered again (which clears ``ended_at``) would get the claim back at
    the next start, beside whoever took the key meanwhile."""
    from meshd.store.claims import load_claims

    await call(svc, "session.register", {"session_id": "cli:a", "source": "cli", "task": "t"})
    await call(svc, "claim.acquire", {"session_id": "cli:a", "resources": ["res:x"]})
    again = svc.state.registry.sessions["cli:a"]
    # what session.end's own commit stores, before the releases it sets off
    await svc.store.commit([("session.end", "cli:a", svc.clock.now(), "ended")])
    await svc.store.commit([("session.put", again)])  # the id registered again

    assert svc.store.read_now(load_claims) == []


async def test_a_pause_is_answered_once_its_releases_are_stored(svc: Service) -> None:
    """SPEC §8: what a reply acknowledges is on disk. A pause releases the session's
    claims; answered before those releases were stored (handed to the writer after
    the reply), a kill -9 in between gave the paused session its claims back at the
    next start. Read the file the moment the reply is there, before the loop turns."""
    await call(svc, "session.register", {"session_id": "cli:a", "source": "cli", "task": "t"})
    await call(svc, "claim.acquire", {"session_id": "cli:a", "resources": ["res:x"]})

    reply = await call(svc, "session.pause", {"session_id": "cli:a", "note": "lunch"})

    db = sqlite3.connect(svc.store.path)
    held = db.execute("SELECT resource FROM claims WHERE session_id = 'cli:a'").fetchall()
    assert reply.reserved == ["res:x"]
    assert held == []
