"""Changed-file notices through the real daemon: who is told, coalescing, durability."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from tests.support import RpcClient

DaemonHandle = Any  # the conftest fixture


class Client(RpcClient):
    """A kept JSON-RPC connection that also collects the file.changed events."""

    def settle(self, expected: int, quiet: float = 0.3) -> list[dict[str, Any]]:
        """The file.changed events pushed: read until ``expected`` are in (however late a
        loaded machine pushes them), then for ``quiet`` seconds more to catch any extra."""

        def changes() -> list[dict[str, Any]]:
            return [e for e in self.events if e["kind"] == "file.changed"]

        try:
            while True:
                self.sock.settimeout(self.timeout if len(changes()) < expected else quiet)
                line = self.file.readline()
                if not line:
                    break
                msg = json.loads(line)
                if msg.get("method") == "event":
                    self.events.append(msg["params"])
        except TimeoutError:
            pass
        finally:
            self.sock.settimeout(self.timeout)
        return changes()


def register(c: Client, sid: str, **kw: Any) -> None:
    c.call(
        "session.register", session_id=sid, source="cli", pid=os.getpid(), liveness="process", **kw
    )


@pytest.fixture
def proj(short_tmp: Path) -> Path:
    root = Path(os.path.realpath(short_tmp))
    (root / "proj" / ".git").mkdir(parents=True)
    (root / "proj" / "src").mkdir()
    (root / "elsewhere").mkdir()
    return root / "proj"


@pytest.fixture
def mesh(daemon: DaemonHandle, proj: Path) -> Any:
    """Writer ``w``; ``watcher`` works in the project; ``holder`` claims src/a.py;
    ``stranger`` works elsewhere; ``kid`` is w's child, in the project. Each but w's
    child has a subscribed connection of its own."""
    c = Client(daemon)
    register(c, "w", cwd=str(proj))
    register(c, "watcher", cwd=str(proj))
    register(c, "holder", cwd=str(proj.parent / "elsewhere" / "h"))
    register(c, "stranger", cwd=str(proj.parent / "elsewhere"))
    register(c, "kid", cwd=str(proj / "src"), parent="w", slot="1")
    c.call("claim.acquire", session_id="holder", resources=[f"{proj}/src/a.py"])
    subs = {}
    for sid in ("w", "watcher", "holder", "stranger", "kid"):
        subs[sid] = Client(daemon)
        subs[sid].call("events.subscribe", session_id=sid)
    yield c, subs
    for s in (c, *subs.values()):
        s.close()


class TestNotices:
    def test_overlapping_sessions_are_told_and_no_one_else(self, mesh: Any, proj: Path) -> None:
        """The watcher (cwd) and the claim holder get one notice; the writer, its child
        and a session elsewhere get none."""
        c, subs = mesh

        r = c.call("board.changed", session_id="w", paths=[f"{proj}/src/a.py"], summary="fix")

        assert r["recorded"] == 1
        assert r["project"] == str(proj)
        assert sorted(r["notified"]) == ["holder", "watcher"]
        (ev,) = subs["holder"].settle(1)
        assert ev["session_id"] == "holder"
        assert ev["from"] == "w"
        assert ev["count"] == 1
        assert ev["paths"] == [f"{proj}/src/a.py"]
        assert ev["text"] == "w changed src/a.py — fix"
        assert "not from the user" in ev["framing"]
        assert len(subs["watcher"].settle(1)) == 1
        for sid in ("w", "kid", "stranger"):
            assert subs[sid].settle(0) == [], sid

    def test_quick_reports_are_coalesced(self, mesh: Any, proj: Path) -> None:
        """Three quick reports by one writer: one event now; the other two are held
        for the quiet period (30 s), not pushed one by one."""
        c, subs = mesh

        first = c.call("board.changed", session_id="w", paths=[f"{proj}/src/x.py"])
        second = c.call("board.changed", session_id="w", paths=[f"{proj}/src/y.py"])
        third = c.call(
            "board.changed", session_id="w", paths=[f"{proj}/src/z.py", f"{proj}/README"]
        )

        assert first["notified"] == ["watcher"]
        assert second["notified"] == []
        assert second["held"] == ["watcher"]
        assert third["notified"] == []
        assert third["held"] == ["watcher"]
        (ev,) = subs["watcher"].settle(1, quiet=1.0)
        assert ev["count"] == 1
        assert ev["paths"] == [f"{proj}/src/x.py"]

    def test_paths_are_canonical_and_non_paths_refused(self, mesh: Any, proj: Path) -> None:
        c, _ = mesh
        link = proj.parent / "link"
        link.symlink_to(proj)

        r = c.call("board.changed", session_id="w", paths=[f"{link}/src/../src/q.py/"])
        bad = c.raw("board.changed", session_id="w", paths=["port:8080"])
        rel = c.raw("board.changed", session_id="w", paths=["src/a.py"])
        nobody = c.raw("board.changed", session_id="ghost", paths=[f"{proj}/a"])

        assert r["project"] == str(proj)
        rows = c.call("board.changes", project_or_path=str(proj))["entries"]
        assert [e["path"] for e in rows] == [f"{proj}/src/q.py"]
        assert bad["error"]["data"]["code"] == "BAD_KEY"
        assert rel["error"]["data"]["code"] == "BAD_KEY"
        assert nobody["error"]["data"]["code"] == "UNKNOWN_SESSION"

    def test_outside_git_the_project_is_the_folder(self, mesh: Any, proj: Path) -> None:
        c, _ = mesh
        loose = proj.parent / "elsewhere" / "notes"
        loose.mkdir()

        as_file = c.call("board.changed", session_id="w", paths=[f"{loose}/todo.md"])
        as_dir = c.call("board.changed", session_id="w", paths=[str(loose)])

        assert as_file["project"] == str(loose)
        assert as_dir["project"] == str(loose)

    def test_outside_git_one_report_gives_each_path_its_own_folder(
        self, mesh: Any, proj: Path
    ) -> None:
        """SPEC §7: outside git a path's project is its folder, whatever else the report
        names. The walk's cache took a folder's own project (outside git) for the
        project of every folder under it, so a file in ``loose/sub`` (or a new folder
        ``loose/new/``) reported after one in ``loose`` landed on ``loose``'s board;
        alone, or listed first, it was on its own."""
        c, _ = mesh
        loose = proj.parent / "elsewhere" / "loose"
        (loose / "sub").mkdir(parents=True)
        paths = [f"{loose}/a.md", f"{loose}/sub/b.md", f"{loose}/new/", f"{proj}/src/c.py"]

        together = c.call("board.changed", session_id="w", paths=paths)
        alone = [c.call("board.changed", session_id="w", paths=[p])["project"] for p in paths]

        expected = [str(loose), str(loose / "sub"), str(loose / "new"), str(proj)]
        assert alone == expected
        assert together["projects"] == expected
        sub = c.call("board.changes", session_id="w", project_or_path=f"{loose}/sub/")
        assert [ch["path"] for ch in sub["entries"]] == [f"{loose}/sub/b.md"] * 2


class TestBroadPlaces:
    """A session whose cwd is ``/``, the home folder or a folder above it is not told
    of every file changed beneath (before: each such session was told of all of them);
    its watches and claims, and a session working in the project, still are."""

    def test_root_and_home_sessions_are_told_only_of_what_they_chose(
        self, mesh_env: Any, short_tmp: Path
    ) -> None:
        from tests.conftest import DaemonHandle as Handle

        top = Path(os.path.realpath(short_tmp))
        home = top / "home"
        (home / "proj" / ".git").mkdir(parents=True)
        proj = home / "proj"
        d = Handle(
            env={**mesh_env.env, "HOME": str(home)}, socket=mesh_env.socket,
            state_dir=mesh_env.state_dir,
        )  # fmt: skip
        d.start()
        c = Client(d)
        try:
            register(c, "w", cwd=str(proj))
            register(c, "worker", cwd=str(proj))
            register(c, "rooted", cwd="/")
            register(c, "homebody", cwd=str(home))
            register(c, "above", cwd=str(top))
            register(c, "dotfiles", cwd=str(home), repo=str(home))
            register(c, "watching", cwd=str(home))
            c.call("board.watch", session_id="watching", paths=[str(proj)])
            register(c, "claiming", cwd="/")
            c.call("claim.acquire", session_id="claiming", resources=[f"{proj}/a.py"])

            r = c.call("board.changed", session_id="w", paths=[f"{proj}/a.py"])
        finally:
            c.close()
            d.stop()

        assert sorted(r["notified"]) == ["claiming", "watching", "worker"]


class TestDurable:
    def test_rows_survive_a_restart(self, daemon: DaemonHandle, mesh: Any, proj: Path) -> None:
        c, _ = mesh
        c.call(
            "board.changed",
            session_id="w",
            paths=[f"{proj}/src/a.py", f"{proj}/src/b.py"],
            summary="auth refactor",
        )
        c.call("board.changed", session_id="w", paths=["/srv/other/x"])

        daemon.restart()
        after = Client(daemon)
        try:
            mine = after.call("board.changes", project_or_path=f"{proj}/src")
            every = after.call("board.changes")
            since = after.call("board.changes", since="2999-01-01T00:00:00Z")
            bad = after.raw("board.changes", since="yesterday")
        finally:
            after.close()

        assert mine["project"] == str(proj)
        assert [(e["path"], e["session_id"], e["summary"]) for e in mine["entries"]] == [
            (f"{proj}/src/a.py", "w", "auth refactor"),
            (f"{proj}/src/b.py", "w", "auth refactor"),
        ]
        assert mine["entries"][0]["at"].endswith("Z")
        assert len(every["entries"]) == 3
        assert since["entries"] == []
        assert bad["error"]["data"]["path"] == "$.since"


def test_a_recipient_without_a_subscriber_finds_the_notice_in_its_inbox(
    daemon: DaemonHandle, proj: Path
) -> None:
    """Nobody listening for the watcher: the change waits in its inbox as a notice."""
    c = Client(daemon)
    register(c, "writer2", cwd=str(proj))
    register(c, "offline", cwd=str(proj))

    c.call("board.changed", session_id="writer2", paths=[str(proj / "src" / "x.py")])
    items = c.call("message.inbox", session_id="offline")["items"]
    c.close()

    assert [(i["kind"], i["from"]) for i in items] == [("notice", "meshd")]
    assert "writer2" in items[0]["text"]
