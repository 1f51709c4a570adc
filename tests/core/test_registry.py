"""The pure registry: registration rules, liveness modes, expiry on an injected clock."""

from __future__ import annotations

import pytest

from meshd.core.clock import ManualClock
from meshd.core.sessions.registry import Registration, Registry, Report
from meshd.core.settings import Settings
from meshd.core.state import MeshState
from meshd.protocol.errors import IdInUse, InvalidParams, SessionExpired, TooLarge, UnknownSession


def reg(**kw: object) -> Registration:
    base: dict[str, object] = dict(
        session_id=None, source="cli", task="", status="idle", model="", provider="",
        pid=None, pid_start=None, host="h", cwd=None, repo=None, branch=None, worktree=None,
        tools=[], parent=None, slot=None, kanban_task=None, accept_queries=None,
        accept_messages=None, liveness="heartbeat", expire_after=None, bind=False, conn_id=None,
    )  # fmt: skip
    base.update(kw)
    return Registration(**base)  # type: ignore[arg-type]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def registry(clock: ManualClock) -> Registry:
    return Registry(clock, Settings(stale_after=20, expire_after=600, heartbeat_interval=5), "p")


class TestRegister:
    def test_generated_id_names_source_and_date(self, registry: Registry) -> None:
        """A session without an id gets ``source:YYYYMMDD-hex``."""
        s, refreshed = registry.register(reg(source="cli"))

        assert s.session_id.startswith("cli:")
        assert len(s.session_id.split("-")[-1]) == 6
        assert refreshed is False

    def test_same_process_refreshes(self, registry: Registry) -> None:
        """Registering a live id again from the same pid refreshes it, keeping started_at."""
        first, _ = registry.register(reg(session_id="a", pid=10, pid_start=5, liveness="process"))
        registry.clock.advance(3)  # type: ignore[attr-defined]
        again, refreshed = registry.register(
            reg(session_id="a", pid=10, pid_start=5, liveness="process", task="new")
        )

        assert refreshed is True
        assert again.task == "new"
        assert again.started_at == first.started_at

    def test_other_process_is_refused(self, registry: Registry) -> None:
        """An id live under another pid is ID_IN_USE."""
        registry.register(reg(session_id="a", pid=10, pid_start=5, liveness="process"))

        with pytest.raises(IdInUse):
            registry.register(reg(session_id="a", pid=11, pid_start=7, liveness="process"))

    def test_reused_pid_with_other_start_time_is_refused(self, registry: Registry) -> None:
        """The same pid with another start time is another process."""
        registry.register(reg(session_id="a", pid=10, pid_start=5, liveness="process"))

        with pytest.raises(IdInUse):
            registry.register(reg(session_id="a", pid=10, pid_start=6, liveness="process"))

    @pytest.mark.parametrize(
        ("field", "value", "error"),
        [
            ("task", "x" * 201, TooLarge),
            ("tools", [f"t{i}" for i in range(11)], TooLarge),
            ("tools", ["x" * 65], TooLarge),
            ("cwd", "relative/path", InvalidParams),
            ("source", "has space", InvalidParams),
            ("liveness", "process", InvalidParams),  # process liveness without a pid
        ],
    )
    def test_bad_fields_are_refused(
        self, registry: Registry, field: str, value: object, error: type[Exception]
    ) -> None:
        """Over-long and malformed fields are refused and nothing is registered."""
        with pytest.raises(error):
            registry.register(reg(session_id="x", **{field: value}))

        assert registry.sessions == {}

    def test_defaults_for_queries_and_messages_come_from_settings(self, clock: ManualClock) -> None:
        """accept_* not given: the profile's defaults apply."""
        r = Registry(clock, Settings(accept_messages=False), "p")

        s, _ = r.register(reg(session_id="a"))

        assert (s.accept_queries, s.accept_messages) == (True, False)


class TestHeartbeatLiveness:
    def test_stale_after_silence_but_claims_time_to_expire(
        self, registry: Registry, clock: ManualClock
    ) -> None:
        """No heartbeat for stale_after: stale, not expired."""
        s, _ = registry.register(reg(session_id="a"))
        clock.advance(21)

        assert registry.is_stale(s, clock.monotonic())
        assert registry.due() == []

    def test_process_session_is_never_stale(self, registry: Registry, clock: ManualClock) -> None:
        """A process session lives with its process: silence makes it idle, not stale."""
        s, _ = registry.register(reg(session_id="p", liveness="process", pid=1, pid_start=1))
        clock.advance(3600)

        assert not registry.is_stale(s, clock.monotonic())
        assert registry.due() == []

    def test_activity_kept_until_the_status_changes(self, registry: Registry) -> None:
        registry.register(reg(session_id="a"))

        s = registry.heartbeat("a", Report(status="tool-running", activity="running tests"))
        kept = s.activity
        registry.heartbeat("a", Report(task="same status"))
        still = s.activity
        registry.heartbeat("a", Report(status="thinking"))

        assert (kept, still, s.activity) == ("running tests", "running tests", "")

    def test_expires_after_expire_after(self, registry: Registry, clock: ManualClock) -> None:
        """No heartbeat for expire_after: due for expiry."""
        registry.register(reg(session_id="a"))
        clock.advance(601)

        due = registry.due()

        assert [(s.session_id, why) for s, why in due] == [("a", "expired")]

    def test_heartbeat_pushes_the_deadline(self, registry: Registry, clock: ManualClock) -> None:
        """A heartbeat moves the deadline; the stale heap entry is re-pushed, not acted on."""
        registry.register(reg(session_id="a"))
        clock.advance(500)
        registry.heartbeat("a")
        clock.advance(200)

        assert registry.due() == []
        clock.advance(401)
        assert [s.session_id for s, _ in registry.due()] == ["a"]

    def test_per_session_expire_after(self, registry: Registry, clock: ManualClock) -> None:
        """A session's own expire_after overrides the profile's."""
        registry.register(reg(session_id="a", expire_after=30))
        clock.advance(31)

        assert [s.session_id for s, _ in registry.due()] == ["a"]

    def test_a_reload_that_shortens_expire_after_applies_to_silent_sessions(
        self, clock: ManualClock
    ) -> None:
        """``expire_after`` lowered by a reload (SPEC §2) holds for a session already
        silent, not only after its next heartbeat; its own expire_after still wins.
        Before, a silent session expired at the deadline of the old setting."""
        state = MeshState(clock, Settings(stale_after=20, expire_after=600), "p")
        state.registry.register(reg(session_id="a"))
        state.registry.register(reg(session_id="own", expire_after=300))
        clock.advance(100)

        state.reconfigure(Settings(stale_after=20, expire_after=60))

        assert [(s.session_id, why) for s, why in state.registry.due()] == [("a", "expired")]
        clock.advance(199)
        assert state.registry.due() == []
        clock.advance(2)
        assert [s.session_id for s, _ in state.registry.due()] == ["own"]

    def test_a_reload_that_lengthens_expire_after_keeps_sessions(self, clock: ManualClock) -> None:
        state = MeshState(clock, Settings(stale_after=20, expire_after=600), "p")
        state.registry.register(reg(session_id="a"))
        clock.advance(100)

        state.reconfigure(Settings(stale_after=20, expire_after=1200))
        clock.advance(600)

        assert state.registry.due() == []
        clock.advance(501)
        assert [s.session_id for s, _ in state.registry.due()] == ["a"]

    def test_suspend_expires_nobody(self, registry: Registry, clock: ManualClock) -> None:
        """Wall time jumping (a laptop suspend) does not move the monotonic deadline."""
        registry.register(reg(session_id="a"))
        clock.suspend(3600)

        assert registry.due() == []

    def test_process_sessions_never_expire_by_silence(
        self, registry: Registry, clock: ManualClock
    ) -> None:
        """A `process` session lives as long as its process, however quiet."""
        registry.register(reg(session_id="a", pid=10, pid_start=1, liveness="process"))
        clock.advance(10_000)

        assert registry.due() == []


class TestReports:
    def test_changed_fields_are_marked_for_snapshot(self, registry: Registry) -> None:
        """A heartbeat that changes a reported field marks the session dirty."""
        registry.register(reg(session_id="a"))

        registry.heartbeat("a", Report(status="thinking", task="t"))

        s = registry.sessions["a"]
        assert (s.status, s.task) == ("thinking", "t")
        assert registry.dirty == {"a"}

    def test_unchanged_fields_do_not_dirty(self, registry: Registry) -> None:
        """Heartbeats alone are not persisted."""
        registry.register(reg(session_id="a", status="idle"))

        registry.heartbeat("a", Report(status="idle"))
        registry.heartbeat("a")

        assert registry.dirty == set()


class TestEnd:
    def test_ended_id_says_expired(self, registry: Registry) -> None:
        """After an end, calls for that id say SESSION_EXPIRED with the reason."""
        registry.register(reg(session_id="a"))
        registry.end("a", "died")

        with pytest.raises(SessionExpired, match="process died"):
            registry.heartbeat("a")

    def test_never_seen_id_is_unknown(self, registry: Registry) -> None:
        with pytest.raises(UnknownSession):
            registry.get("nope")


class TestBind:
    def test_closed_connection_ends_after_one_interval(
        self, registry: Registry, clock: ManualClock
    ) -> None:
        """A bound session ends one heartbeat_interval after its connection closes."""
        registry.register(reg(session_id="a", bind=True, conn_id=7))
        registry.connection_closed(7)
        clock.advance(4)
        assert registry.due() == []

        clock.advance(2)

        assert [(s.session_id, why) for s, why in registry.due()] == [("a", "unbound")]

    def test_re_register_rebinds(self, registry: Registry, clock: ManualClock) -> None:
        """Re-registering on a new connection cancels the pending unbind."""
        registry.register(reg(session_id="a", bind=True, conn_id=7))
        registry.connection_closed(7)
        registry.register(reg(session_id="a", bind=True, conn_id=8))
        clock.advance(10)

        assert registry.due() == []


class TestStall:
    def test_stall_grants_grace_before_expiry(self, registry: Registry, clock: ManualClock) -> None:
        """After the daemon itself stalled past expire_after, heartbeat sessions get one
        stale_after to heartbeat again instead of all expiring on resume."""
        registry.register(reg(session_id="hb"))
        registry.register(reg(session_id="proc", pid=10, pid_start=5, liveness="process"))
        clock.advance(700)  # the daemon was stopped: nothing ran, expire_after (600) passed
        registry.stalled()

        assert registry.due() == []
        registry.heartbeat("hb")  # the heartbeat that waited in its socket
        clock.advance(19)
        assert registry.due() == []

    def test_grace_runs_out_without_a_heartbeat(
        self, registry: Registry, clock: ManualClock
    ) -> None:
        """A session whose client really is gone expires once the grace is over."""
        registry.register(reg(session_id="hb"))
        clock.advance(700)
        registry.stalled()
        clock.advance(21)

        assert [(s.session_id, why) for s, why in registry.due()] == [("hb", "expired")]


class TestRestore:
    def test_heartbeat_session_gets_one_stale_after_of_grace(
        self, registry: Registry, clock: ManualClock
    ) -> None:
        """Restored long-silent heartbeat sessions live stale_after more, then expire."""
        s, _ = registry.register(reg(session_id="a"))
        registry.end("a")
        clock.advance(5000)  # the daemon was down longer than expire_after
        s.last_heartbeat = clock.now() - 5000
        registry.restore(s)

        assert registry.due() == []
        assert registry.is_stale(s, clock.monotonic())
        clock.advance(21)
        assert [x.session_id for x, _ in registry.due()] == ["a"]

    def test_restore_all_takes_back_many_at_once(self, clock: ManualClock) -> None:
        """One pass restores what one at a time did: places, grace, deadlines in order."""
        old = Registry(clock, Settings(stale_after=20, expire_after=600, heartbeat_interval=5), "p")
        rows = [
            old.register(reg(session_id="quiet", cwd="/srv/a/one", repo="/srv/a"))[0],
            old.register(reg(session_id="bound", cwd="/srv/b", bind=True, conn_id=3))[0],
            old.register(reg(session_id="proc", cwd="/srv/a/two", liveness="process", pid=1))[0],
        ]
        clock.advance(5000)  # down longer than expire_after
        new = Registry(clock, Settings(stale_after=20, expire_after=600, heartbeat_interval=5), "p")
        new.restore(rows[2])  # a heap that is not empty: the rest are pushed onto it
        new.restore_all(rows[:2])

        assert sorted(new.sessions) == ["bound", "proc", "quiet"]
        assert new.sessions["bound"].conn_id is None
        assert {s.session_id for s, _, _ in new.present_at("/srv/a")} == {"quiet", "proc"}
        assert [s.session_id for s, _, _ in new.present_at("/srv/b/x")] == ["bound"]
        clock.advance(19)
        assert new.due() == []
        clock.advance(2)  # one stale_after of grace for both; the process session stays
        assert [(s.session_id, why) for s, why in new.due()] == [
            ("bound", "unbound"),
            ("quiet", "expired"),
        ]

    def test_restore_all_schedules_what_deadline_says(self, clock: ManualClock) -> None:
        """restore_all computes deadlines inline: every session's entry is deadline(s)."""
        st = Settings(stale_after=20, expire_after=600, heartbeat_interval=5)
        old = Registry(clock, st, "p")
        rows = [
            old.register(reg(session_id="hb"))[0],
            old.register(reg(session_id="own", expire_after=3))[0],
            old.register(reg(session_id="bound", bind=True, conn_id=3))[0],
            old.register(reg(session_id="pbound", liveness="process", pid=1, bind=True))[0],
            old.register(reg(session_id="proc", liveness="process", pid=1))[0],
        ]
        rows[1].last_heartbeat = clock.now() + 50  # a clock that went back: no negative age
        clock.advance(30)
        new = Registry(clock, st, "p")
        new.restore_all(iter(rows))

        expected = sorted((new.deadline(s), s.session_id) for s in rows if s.session_id != "proc")
        assert sorted(new._heap) == expected
        assert [(s.session_id, s.grace_until > 0, s.unbound_at is not None) for s in rows] == [
            ("hb", True, False), ("own", True, False), ("bound", True, True),
            ("pbound", False, True), ("proc", False, False),
        ]  # fmt: skip

    def test_ancestors_follow_parent_links(self, registry: Registry) -> None:
        registry.register(reg(session_id="root"))
        registry.register(reg(session_id="kid", parent="root"))
        registry.register(reg(session_id="grandkid", parent="kid"))

        assert registry.ancestors("grandkid") == ("kid", "root")


class TestPresence:
    def test_present_at_finds_containing_and_contained_places(self, registry: Registry) -> None:
        """A path shows the sessions working above it and below it, not beside it."""
        registry.register(reg(session_id="top", cwd="/home/u/proj"))
        registry.register(reg(session_id="deep", cwd="/home/u/proj/src/pkg"))
        registry.register(reg(session_id="other", cwd="/home/u/other"))
        registry.register(reg(session_id="repo", cwd="/tmp", repo="/home/u/proj"))

        found = {(s.session_id, why) for s, why, _ in registry.present_at("/home/u/proj/src")}

        assert found == {("top", "cwd"), ("deep", "cwd"), ("repo", "repo")}

    def test_index_follows_moves_and_ends(self, registry: Registry) -> None:
        """A heartbeat that changes cwd moves the session; an end removes it."""
        registry.register(reg(session_id="a", cwd="/srv/one"))
        registry.heartbeat("a", Report(cwd="/srv/two"))

        assert [s.session_id for s, _, _ in registry.present_at("/srv/two/x")] == ["a"]
        assert registry.present_at("/srv/one/x") == []
        registry.end("a")
        assert registry.present_at("/srv/two/x") == []
        assert registry.presence.places == {}

    def test_recently_changed_files_make_a_session_present(
        self, registry: Registry, clock: ManualClock
    ) -> None:
        """SPEC §5: a session that changed the file (or files under the folder) is
        present there for RECENT_CHANGE seconds, wherever its cwd is."""
        from meshd.core.sessions.presence import RECENT_CHANGE

        registry.register(reg(session_id="w", cwd="/elsewhere"))
        registry.changed("w", ["/p/src/a.py", "/p/src/b.py"])

        at_file = [
            (s.session_id, why, where) for s, why, where in registry.present_at("/p/src/a.py")
        ]
        at_folder = {where for _, _, where in registry.present_at("/p")}
        beside = registry.present_at("/p/srcx")
        clock.advance(RECENT_CHANGE + 1)

        assert at_file == [("w", "changed", "/p/src/a.py")]
        assert at_folder == {"/p/src/a.py", "/p/src/b.py"}
        assert beside == []
        assert registry.present_at("/p/src/a.py") == []


class TestLayout:
    """10,000 sessions must cost little memory and no GC work (bench: memory, GC pause)."""

    def test_a_session_holds_no_object_the_collector_tracks(self, registry: Registry) -> None:
        """Session is gc=False and its tools and anchors are tuples of atoms: a full
        collection never visits anything a session owns (gc.freeze() covers only what
        existed at start-up; sessions registered later must not need it)."""
        import gc

        s, _ = registry.register(reg(session_id="a", pid=10, pid_start=1, tools=["bash", "edit"]))
        registry.attach("a", 11, 2)
        registry.heartbeat("a", Report(tools=["bash"]))
        gc.collect()  # a tuple of untracked items is untracked when a collection sees it:
        gc.collect()  # the inner pairs of anchors first, the outer tuple the next time

        assert not gc.is_tracked(s)
        assert not gc.is_tracked(s.tools)
        assert not gc.is_tracked(s.anchors)

    def test_shared_strings_are_one_object(self, registry: Registry) -> None:
        """Two sessions in one repo hold the same string objects, not copies."""
        a, _ = registry.register(reg(session_id="a", cwd="".join(["/srv/", "p"]), model="m" * 3))
        b, _ = registry.register(reg(session_id="b", cwd="".join(["/srv/", "p"]), model="m" * 3))
        registry.heartbeat("b", Report(branch="".join(["ma", "in"])))
        registry.heartbeat("a", Report(branch="".join(["ma", "in"])))

        assert a.cwd is b.cwd
        assert a.model is b.model
        assert a.branch is b.branch

    def test_reporting_the_same_tools_changes_nothing(self, registry: Registry) -> None:
        """The report's list and the session's tuple compare by value."""
        registry.register(reg(session_id="a", tools=["bash"]))

        registry.heartbeat("a", Report(tools=["bash"]))
        assert registry.dirty == set()
        registry.heartbeat("a", Report(tools=["bash", "edit"]))
        assert registry.dirty == {"a"}
        assert registry.sessions["a"].tools == ("bash", "edit")

    def test_anchors_keep_their_order_when_the_main_process_goes(self, registry: Registry) -> None:
        """The first anchor becomes the main process; the others stay anchors."""
        registry.register(reg(session_id="a", pid=10, pid_start=1, liveness="process"))
        registry.attach("a", 11, 2)
        registry.attach("a", 12, 3)

        assert registry.process_gone("a", 10) is False
        s = registry.sessions["a"]
        assert (s.pid, s.pid_start, s.anchors) == (11, 2, ((12, 3),))
        assert registry.process_gone("a", 12) is False
        assert registry.process_gone("a", 11) is True
        assert s.pids() == []
