"""``session.list`` keeps each session's encoded form until the session changes
(meshd.domains.listing): the bytes must be what encoding its ``SessionInfo`` gives, and
every change must be seen in the next listing.

Driven in-process like test_dispatch.py: a real Service with every domain, a manual
clock, sessions registered and changed through the core (heartbeats, ranks, claims).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.support import profile_paths

from meshd.app import wire
from meshd.core.clock import ManualClock
from meshd.core.sessions.registry import Registration, Report
from meshd.core.settings import Settings
from meshd.core.state import MeshState
from meshd.domains import listing
from meshd.domains.sessions import SessionHandlers
from meshd.keys import from_canonical
from meshd.protocol import methods as m
from meshd.protocol.jsonrpc import Dispatcher, encoder, response
from meshd.service import Conn, Service
from meshd.store import Store

LIST = b'{"jsonrpc":"2.0","id":7,"method":"session.list"}'
FRESH = b'{"jsonrpc":"2.0","id":7,"method":"session.list","params":{"fresh":true}}'


class Mesh:
    """A Service's session.list over the dispatcher, and the core to change sessions."""

    def __init__(self, root: Path) -> None:
        paths = profile_paths(root)
        self.clock = ManualClock()
        self.state = MeshState(self.clock, Settings(), "test")
        self.svc = Service(self.state, Store(paths.database), paths, domains=wire)
        self.rpc = Dispatcher(self.svc.lookup)

    def register(self, sid: str, **kw: Any) -> None:
        fields: dict[str, Any] = {
            "session_id": sid, "source": "cli", "task": "", "status": "idle", "model": "",
            "provider": "", "pid": None, "pid_start": None, "host": "vm", "cwd": None,
            "repo": None, "branch": None, "worktree": None, "tools": [], "parent": None,
            "slot": None, "kanban_task": None, "accept_queries": None,
            "accept_messages": None, "liveness": "heartbeat", "expire_after": None,
            "bind": False, "conn_id": None,
        }  # fmt: skip
        fields.update(kw)
        self.state.register(Registration(**fields))
        self.state.drain()

    async def raw(self, line: bytes = LIST) -> bytes:
        reply = await self.rpc.frame(line, Conn(1))
        assert reply is not None
        return reply

    async def listed(self, line: bytes = LIST) -> dict[str, dict[str, Any]]:
        result = json.loads(await self.raw(line))["result"]
        return {s["session_id"]: s for s in result["sessions"]}

    def expected(self, fresh: bool = False) -> bytes:
        """The reply as it was built before the cache: a SessionInfo per session, encoded."""
        handlers = next(d for d in self.svc.domains if isinstance(d, SessionHandlers))
        now_m, now_w = self.clock.monotonic(), self.clock.now()
        reg = self.state.registry
        infos = [
            handlers.info(s, now_m, now_w, m.LISTED_CLAIMS)
            for s in reg.sessions.values()
            if not (fresh and reg.is_stale(s, now_m))
        ]
        return encoder.encode(response(7, m.ListResult(profile="test", sessions=infos)))


@pytest.fixture
def mesh(tmp_path: Path) -> Mesh:
    return Mesh(tmp_path)


def varied(mesh: Mesh) -> None:
    """Sessions that between them set every field a listing shows (a NUL among them: the
    kept forms are split at a raw NUL, which the encoder escapes inside strings)."""
    mesh.register(
        "full", task='fix "quotes", \\, ünïcode — \u2028, 100%s %b %% and a NUL \x00',
        status="thinking",
        model="m", provider="p", cwd="/home/u/p", repo="/home/u/p", branch="feat/x",
        worktree="/home/u/p-wt", tools=["bash", "edit"], parent="boss", slot="s1",
        kanban_task="K-1", accept_queries=False, accept_messages=False,
    )  # fmt: skip
    mesh.register("proc", liveness="process", pid=os.getpid())
    mesh.register("bare")
    mesh.clock.advance(3.25)
    mesh.state.heartbeat("bare", Report(activity="running tests"))
    s = mesh.state.registry.sessions["full"]
    mesh.state.prioritize(msgspec.structs.replace(s, rank=3, rank_by="a person", rank_at=5.0))
    keys = [from_canonical(f"file:/home/u/p/f{i}") for i in range(3)]
    mesh.state.claims.acquire("full", keys, reason="editing")
    mesh.state.drain()


class TestBytes:
    async def test_listing_is_what_encoding_each_session_info_gives(self, mesh: Mesh) -> None:
        varied(mesh)

        assert await mesh.raw() == mesh.expected()

    async def test_kept_forms_stay_exact_as_the_clock_moves(self, mesh: Mesh) -> None:
        varied(mesh)
        await mesh.raw()
        for step in (0.001, 0.5, 61.0, 10_000.0):  # ages, idle times, stale
            mesh.clock.advance(step)

            assert await mesh.raw() == mesh.expected()
            assert await mesh.raw(FRESH) == mesh.expected(fresh=True)

    async def test_a_long_claim_list_is_cut_as_before(self, mesh: Mesh) -> None:
        mesh.register("many")
        keys = [from_canonical(f"file:/x/f{i:03}") for i in range(m.LISTED_CLAIMS + 5)]
        mesh.state.claims.acquire("many", keys)
        mesh.state.drain()

        listed = (await mesh.listed())["many"]

        assert await mesh.raw() == mesh.expected()
        assert (len(listed["claims"]), listed["claims_total"]) == (m.LISTED_CLAIMS, 105)

    async def test_a_large_registry_is_listed_alike_without_keeping(
        self, mesh: Mesh, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(listing, "CACHED_UP_TO", 2)
        varied(mesh)

        assert await mesh.raw() == mesh.expected()
        assert await mesh.raw() == mesh.expected()

    async def test_a_hidden_profile_gets_the_plain_answer(self, mesh: Mesh) -> None:
        mesh.register("a")  # visible_to_profiles is empty by default
        line = b'{"jsonrpc":"2.0","id":7,"method":"session.list","params":{"for_profile":"x"}}'

        result = json.loads(await mesh.raw(line))["result"]

        assert result == {"profile": "test", "visible": False, "sessions": []}


class TestChangesAreSeen:
    async def test_each_reported_field_shows_in_the_next_listing(self, mesh: Mesh) -> None:
        mesh.register("a", task="one", cwd="/home/u/p")
        await mesh.listed()
        changes: list[dict[str, Any]] = [
            {"status": "blocked"}, {"task": "two"}, {"cwd": "/home/u/q"},
            {"repo": "/home/u/q"}, {"branch": "b2"}, {"worktree": "/home/u/w"},
            {"tools": ["grep"]}, {"activity": "reading"},
        ]  # fmt: skip
        for change in changes:
            mesh.clock.advance(1.0)
            mesh.state.heartbeat("a", Report(**change))

            shown = (await mesh.listed())["a"]

            assert {k: shown[k] for k in change} == change
            assert await mesh.raw() == mesh.expected()

    async def test_a_plain_heartbeat_moves_last_heartbeat(self, mesh: Mesh) -> None:
        mesh.register("a")
        before = (await mesh.listed())["a"]["last_heartbeat"]
        mesh.clock.advance(2.0)
        mesh.state.heartbeat("a", None)

        after = (await mesh.listed())["a"]

        assert after["last_heartbeat"] != before
        assert after["age_s"] == 0.0

    async def test_a_plain_heartbeat_keeps_the_session_encoded(
        self, mesh: Mesh, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A heartbeat that changes nothing a listing shows (its last_heartbeat stays
        in the same second; its age is filled in per listing) costs no new encoding."""
        mesh.register("a", task="one")
        mesh.clock.advance(0.25)
        await mesh.listed()
        encoded: list[str] = []
        real = listing.segments
        monkeypatch.setattr(
            listing, "segments", lambda s, host: encoded.append(s.session_id) or real(s, host)
        )
        mesh.clock.advance(0.5)
        mesh.state.heartbeat("a", None)

        assert await mesh.raw() == mesh.expected()
        assert encoded == []
        mesh.clock.advance(1.0)  # into the next second: last_heartbeat's text moves
        mesh.state.heartbeat("a", None)
        assert await mesh.raw() == mesh.expected()
        assert encoded == ["a"]

    async def test_rank_claims_refresh_and_end_show_in_the_next_listing(self, mesh: Mesh) -> None:
        mesh.register("a", model="m1")
        mesh.register("b")
        await mesh.listed()
        s = mesh.state.registry.sessions["a"]
        mesh.state.prioritize(msgspec.structs.replace(s, rank=7, rank_by="me", rank_at=1.0))
        assert (await mesh.listed())["a"]["rank"] == 7

        mesh.state.claims.acquire("a", [from_canonical("res:x")])
        mesh.state.drain()
        shown = (await mesh.listed())["a"]
        assert (shown["claims_total"], [c["resource"] for c in shown["claims"]]) == (1, ["res:x"])

        mesh.register("a", model="m2")  # a refresh with other fields
        assert (await mesh.listed())["a"]["model"] == "m2"

        mesh.state.end("b")
        mesh.state.drain()
        assert set(await mesh.listed()) == {"a"}
        assert await mesh.raw() == mesh.expected()


class TestMs:
    """``listing.ms`` is ``round(max(0.0, x), 3)`` exactly: the listing's durations."""

    def test_equal_to_round_everywhere_tried(self) -> None:
        import random

        rnd = random.Random(17)
        values = [0.0, -0.0, -1.5, 1e-9, 0.0005, 0.0015, 0.0025, 1.0005, 2.675, 1e11, 1e12, 3e15]
        values += [rnd.uniform(0, 10) for _ in range(50_000)]
        values += [rnd.uniform(0, 1e9) for _ in range(50_000)]
        values += [10 ** rnd.uniform(-6, 13) for _ in range(50_000)]
        # exact ties and their neighbours (the halves round to even, or are not halves)
        for k in (rnd.randrange(10**10) for _ in range(20_000)):
            half = (k + 0.5) / 1000
            values += [half, math.nextafter(half, 0), math.nextafter(half, math.inf)]
        # what listings compute: a wall clock minus an earlier one
        now = 1_764_560_000.0
        values += [now + rnd.uniform(0, 1e5) - now for _ in range(50_000)]

        wrong = [x for x in values if listing.ms(x) != round(max(0.0, x), 3)]
        assert wrong == []


class TestDurations:
    """``listing.durations`` encodes ``ms(now - t)`` of each time exactly as the encoder
    writes that float, whichever way it takes."""

    def test_equal_to_encoding_ms_everywhere_tried(self) -> None:
        import random

        rnd = random.Random(23)
        now = 1_764_560_000.0
        ages = [0.0, 1e-9, 0.0004, 0.0005, 0.0015, 2.675, 1.0005, 999_999_999.0, 1e9, 3e10]
        ages += [rnd.uniform(0, 10) for _ in range(20_000)]
        ages += [10 ** rnd.uniform(-6, 9.5) for _ in range(20_000)]
        for k in (rnd.randrange(10**9) for _ in range(5_000)):  # halves and neighbours
            half = (k + 0.5) / 1000
            ages += [half, math.nextafter(half, 0), math.nextafter(half, math.inf)]
        times = [now - a for a in ages] + [now + 5.0, now]  # the clock stepped back; now
        encode = msgspec.json.Encoder().encode

        def want(ts: list[float]) -> tuple[bytes, ...]:
            return tuple(encode(listing.ms(now - t)) for t in ts)

        for i in range(0, len(times), 20):  # a listing's worth at a time, both ways
            chunk = times[i : i + 20]
            assert listing.durations(tuple(chunk), now) == want(chunk), chunk
        assert listing.durations((), now) == ()
