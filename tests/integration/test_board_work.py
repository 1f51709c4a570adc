"""The rest of the board through the real daemon: posts, reads, watches, the whole view,
and changed-file notices to sessions that watch or recently read an overlapping path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.integration.test_board import Client, proj, register

DaemonHandle = Any
__all__ = ["proj"]  # the fixture, used by name


@pytest.fixture
def team(daemon: DaemonHandle, proj: Path) -> Any:
    """Writer ``w`` and three sessions elsewhere (no cwd, claim or repo overlap):
    ``watcher`` watches src/, ``reader`` read src/a.py, ``idle`` did neither. Each has a
    subscribed connection."""
    c = Client(daemon)
    elsewhere = str(proj.parent / "elsewhere")
    register(c, "w", cwd=str(proj))
    for sid in ("watcher", "reader", "idle"):
        register(c, sid, cwd=elsewhere)
    c.call("board.watch", session_id="watcher", paths=[f"{proj}/src"])
    c.call("board.touch", session_id="reader", paths=[f"{proj}/src/a.py"])
    subs = {}
    for sid in ("watcher", "reader", "idle"):
        subs[sid] = Client(daemon)
        subs[sid].call("events.subscribe", session_id=sid)
    yield c, subs
    for s in (c, *subs.values()):
        s.close()


class TestNoticesToWatchersAndReaders:
    def test_a_change_reaches_who_watches_or_read_it_and_no_one_else(
        self, team: Any, proj: Path
    ) -> None:
        c, subs = team

        r = c.call("board.changed", session_id="w", paths=[f"{proj}/src/a.py"], summary="v2")

        assert sorted(r["notified"]) == ["reader", "watcher"]
        (ev,) = subs["reader"].settle(1)
        assert ev["text"] == "w changed src/a.py — v2"
        assert len(subs["watcher"].settle(1)) == 1
        assert subs["idle"].settle(0) == []

    def test_a_change_elsewhere_in_the_watched_folder_skips_the_reader(
        self, team: Any, proj: Path
    ) -> None:
        c, _ = team

        r = c.call("board.changed", session_id="w", paths=[f"{proj}/src/b.py"])

        assert r["notified"] == ["watcher"]

    def test_a_stopped_watch_draws_nothing(self, team: Any, proj: Path) -> None:
        c, _ = team
        c.call("board.watch", session_id="watcher", paths=[f"{proj}/src"], stop=True)

        r = c.call("board.changed", session_id="w", paths=[f"{proj}/src/b.py"])

        assert r["notified"] == []

    def test_marks_survive_kill_9(self, daemon: DaemonHandle, team: Any, proj: Path) -> None:
        c, subs = team
        for s in (c, *subs.values()):
            s.close()
        daemon.kill()
        daemon.start()
        c = Client(daemon)

        r = c.call("board.changed", session_id="w", paths=[f"{proj}/src/a.py"])
        c.close()

        assert sorted(r["notified"]) == ["reader", "watcher"]

    def test_a_watcher_with_no_subscriber_finds_it_in_its_inbox(
        self, daemon: DaemonHandle, proj: Path
    ) -> None:
        c = Client(daemon)
        register(c, "w", cwd=str(proj))
        register(c, "quiet", cwd=str(proj.parent / "elsewhere"))
        c.call("board.watch", session_id="quiet", paths=[str(proj)])

        c.call("board.changed", session_id="w", paths=[f"{proj}/README"])
        items = c.call("message.inbox", session_id="quiet")["items"]
        c.close()

        assert [i["text"] for i in items] == ["w changed README"]


class TestShow:
    def test_the_whole_board(self, daemon: DaemonHandle, proj: Path) -> None:
        """Progress, pitfalls, changed files, who is present and who watches."""
        c = Client(daemon)
        register(c, "a", cwd=str(proj), task="auth refactor")
        register(c, "b", cwd=str(proj.parent / "elsewhere"))
        c.call("board.post", session_id="a", kind="progress", text="half the endpoints done")
        c.call("board.post", session_id="a", kind="pitfall", text="tests need TZ=UTC")
        c.call("board.changed", session_id="a", paths=[f"{proj}/src/a.py"], summary="v2")
        c.call("board.watch", session_id="b", paths=[f"{proj}/src"])

        board = c.call("board.show", project_or_path=str(proj / "src"))
        c.close()

        assert board["project"] == str(proj)
        assert [p["text"] for p in board["progress"]] == ["half the endpoints done"]
        assert [p["text"] for p in board["pitfalls"]] == ["tests need TZ=UTC"]
        assert [(x["path"], x["summary"]) for x in board["changes"]] == [(f"{proj}/src/a.py", "v2")]
        assert [(x["session_id"], x["task"]) for x in board["present"]] == [("a", "auth refactor")]
        assert [(m["session_id"], m["kind"]) for m in board["watching"]] == [("b", "watch")]

    def test_a_named_project_and_posts_that_survive_a_restart(self, daemon: DaemonHandle) -> None:
        c = Client(daemon)
        register(c, "a")
        c.call("board.post", session_id="a", kind="progress", text="x", project_or_path="infra")
        c.close()
        daemon.kill()
        daemon.start()
        c = Client(daemon)

        board = c.call("board.show", project_or_path="infra")
        c.close()

        assert [p["text"] for p in board["progress"]] == ["x"]

    def test_a_post_too_long_is_refused(self, daemon: DaemonHandle) -> None:
        c = Client(daemon)
        register(c, "a", cwd="/tmp")

        reply = c.raw("board.post", session_id="a", kind="pitfall", text="x" * 9000)
        c.close()

        assert reply["error"]["data"]["code"] == "TOO_LARGE"
