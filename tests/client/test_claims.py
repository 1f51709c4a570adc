"""Claims in the blocking library: ``Session.claim`` / ``check`` / ``release`` (SPEC §5, §10).

The pure helpers of :mod:`meshctl._claims` (the hint for a relative key, which keys a grant
newly took, the holder sentence) always run. Tests that need the daemon's
``claim.*`` methods are an expected failure (strict) until the daemon serves
them, so they become real tests -- and a stale mark a failure -- when it does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.support import wait_for

from meshctl import BadKey, Mesh, Session, _claims


class TestMeant:
    @pytest.mark.parametrize(
        ("typed", "meant"),
        [
            ("src/a.py", "/w/src/a.py"),
            ("./a", "/w/a"),
            ("../up", "/up"),
            (".", "/w"),
            ("file:rel/x", "file:/w/rel/x"),
            ("repo:.", "repo:/w"),
            ("branch:repo:main", "branch:/w/repo:main"),
            ("/abs/p", None),
            ("file:/abs/p", None),
            ("~/p", None),
            ("file:~/p", None),
            ("port:8080", None),
            ("branch:/r:main", None),
            ("branch:main", None),
            ("memory", None),
            ("ui:desktop", None),
            ("file:", None),
            ("", None),
            ("weird:thing", None),
        ],
    )
    def test_relative_paths_only(self, typed: str, meant: str | None) -> None:
        """The absolute key a relative path would mean (a hint, never sent); None for
        everything else (~ and unknown kinds are the daemon's to expand or refuse)."""
        assert _claims.meant(typed, "/w") == meant

    def test_default_cwd(self) -> None:
        assert _claims.meant("x") == os.path.join(os.getcwd(), "x")


class TestAcquired:
    def test_only_new_keys(self) -> None:
        """A wrapper releases what it took, never what was already held."""
        result = {
            "status": "granted",
            "token": 12,
            "claims": [
                {"resource": "file:/a", "mode": "exclusive", "token": 12},
                {"resource": "file:/b", "mode": "exclusive", "token": 7, "already_held": True},
            ],
        }

        assert _claims.acquired(result) == ["file:/a"]
        assert _claims.token_of(result) == 12

    def test_held_before_list_and_whole_set(self) -> None:
        claims = [{"resource": "res:a"}, {"resource": "res:b"}]

        by_list = {"status": "granted", "claims": claims, "held_before": ["res:b"]}
        whole = {"status": "granted", "claims": claims, "already_held": True}
        held = {"status": "held", "holders": [{"session_id": "x"}]}

        assert _claims.acquired(by_list) == ["res:a"]
        assert _claims.acquired(whole) == []
        assert _claims.acquired(held) == []

    def test_holder_sentence(self) -> None:
        """The SPEC's sentence: who, verb by kind, branch, since, reason else task."""
        now = time.time()
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
        holder = {
            "session_id": "cli:1",
            "resource": "port:8080",
            "since": since,
            "task": "serving docs",
        }

        line = _claims.holder_line(holder, home="/home/u", now=now)

        assert line == f"cli:1 holds port:8080 since {time.strftime('%H:%M')} — serving docs"


class TestNoOp:
    def test_disabled_claim_is_granted_unguarded(self, daemon: Any, mesh_env: Any) -> None:
        """enabled = false: the claim is a granted no-op that says it guards nothing."""
        mesh_env.write_config("[defaults]\nenabled = false\n")
        daemon.restart()
        with Mesh() as mesh, mesh.session(task="t") as s, s.claim("file:/x") as c:
            assert c.granted
            assert not c.guarded
            assert c.token is None
            assert not c.lost

    def test_fail_open_claim_is_granted_unguarded(self, mesh_env: Any) -> None:
        """Unreachable with fail_open: granted, unguarded, and nothing raised."""
        (mesh_env.state_dir).write_text("not a folder")  # autostart cannot work
        with Mesh(fail_open=True) as mesh, mesh.session(task="t") as s:
            c = s.claim("file:/x", wait=1)
            assert c.granted
            assert not c.guarded
            assert c.release() == []

    def test_claim_needs_a_resource(self, daemon: Any) -> None:
        with Mesh() as mesh, mesh.session(task="t") as s, pytest.raises(ValueError):
            s.claim()


class TestWithDaemon:
    def test_granted_held_and_released_on_exit(self, daemon: Any) -> None:
        """with s.claim(): granted with a token; another session sees holders; the
        block's end releases it."""
        with Mesh() as mesh, mesh.session(task="a") as a, mesh.session(task="b") as b:
            with a.claim("res:db", reason="migrate") as c:
                other = b.claim("res:db")
                assert c.granted
                assert c.token is not None
                assert not other.granted
                assert other.holders[0]["session_id"] == a.session_id
                assert other.holders[0]["reason"] == "migrate"
            after = b.claim("res:db")

            assert after.granted
            after.release()

    def test_never_releases_what_was_already_held(self, daemon: Any) -> None:
        """An inner claim on a key the session already held leaves it held on exit."""
        with Mesh() as mesh, mesh.session(task="a") as a, mesh.session(task="b") as b:
            outer = a.claim("res:x")
            with a.claim("res:x") as inner:
                assert inner.granted
                assert inner.acquired == []
            still_held = not b.claim("res:x").granted
            outer.release()

            assert outer.acquired
            assert still_held

    def test_check_and_validate(self, daemon: Any) -> None:
        with Mesh() as mesh, mesh.session(task="a") as a, mesh.session(task="b") as b:
            c = a.claim("res:y")
            seen = b.check("res:y")
            valid = c.validate()

            assert [h["session_id"] for h in seen["claims"]] == [a.session_id]
            assert valid
            assert not c.lost

    def test_waiter_granted_after_release(self, daemon: Any) -> None:
        """wait > 0 queues; the grant comes when the holder lets go (no polling)."""
        import threading

        with Mesh() as one, Mesh() as two, one.session(task="a") as a, two.session(task="b") as b:
            first = a.claim("res:q")
            got: list[bool] = []
            waiter = threading.Thread(target=lambda: got.append(b.claim("res:q", wait=20).granted))
            waiter.start()
            while not one.call("mesh.info")["counts"]["waiters"]:
                time.sleep(0.01)
            first.release()
            waiter.join(30)

            assert got == [True]


class TestRelativeKeys:
    def test_sent_as_typed_and_refused(
        self, daemon: Any, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Session.claim/check/release and broadcast send a relative path as typed: the
        daemon refuses it with BAD_KEY naming it (it never reads the caller's folder)."""
        monkeypatch.chdir(short_tmp)
        calls: dict[str, Callable[[Session], object]] = {
            "src/a.py": lambda s: s.claim("res:db", "src/a.py"),
            "file:rel": lambda s: s.check("file:rel"),
            "./a": lambda s: s.release("./a"),
            ".": lambda s: s.broadcast("hi", path="."),
        }
        with Mesh() as mesh, mesh.session(task="a") as a:
            for key, call in calls.items():
                with pytest.raises(BadKey) as refused:
                    call(a)

                assert refused.value.data["key"] == key
                assert f"bad resource key {key!r}: the path is relative" in refused.value.message
            held = mesh.call("session.list")["sessions"][0]["claims"]

        assert held == []


class TestLost:
    """``Claim.lost`` and ``on_lost`` turn true within one heartbeat of a loss (SPEC §5,
    §10), through the real daemon: ttl, steal, expiry, and a restart that lost one."""

    def test_ttl(self, daemon: Any) -> None:
        seen: list[str] = []
        with Mesh() as mesh, mesh.session(task="a", on_lost=seen.append) as a:
            c = a.claim("res:ttl", ttl=0.2)
            other = a.claim("res:kept")
            wait_for(lambda: c.lost and seen)  # on_lost runs just after lost is set

            assert seen == a.lost
            assert f"res:ttl (token {c.token}) expired" in seen[0]
            assert not other.lost

    def test_steal(self, daemon: Any) -> None:
        seen: list[str] = []
        with Mesh() as mesh, mesh.session(task="a", on_lost=seen.append) as a:
            with mesh.session(task="b") as b:
                c = a.claim("res:st")
                b.mesh.call(
                    "claim.steal",
                    {"session_id": b.session_id, "resources": ["res:st"], "reason": "hotfix"},
                )
                wait_for(lambda: c.lost and seen)  # on_lost runs just after lost is set

            assert seen == [
                f"your claim on res:st (token {c.token}) was stolen by {b.session_id} — hotfix"
            ]

    def test_expiry(self, daemon: Any) -> None:
        """No heartbeat for expire_after: the next heartbeat re-registers, and the handle
        and the message say exactly which claim went."""
        with Mesh() as mesh, mesh.session(task="a", heartbeat_interval=3600, expire_after=0.3) as a:
            c = a.claim("res:ex")
            wait_for(lambda: "error" in daemon.call("session.get", {"session_id": a.session_id}))
            assert not c.lost
            a.heartbeat()

            assert c.lost
            assert len(a.lost) == 1
            assert f"res:ex (token {c.token})" in a.lost[0]

    def test_restart_reports_exactly_the_lost_claim(self, daemon: Any, mesh_env: Any) -> None:
        """Restored after a kill -9, but one claim is gone from the database meanwhile:
        the re-registration validates every token and names just that one."""
        import sqlite3

        seen: list[str] = []
        mesh = Mesh(autostart=False)
        with mesh.session(task="a", on_lost=seen.append) as a:
            gone, kept = a.claim("res:gone"), a.claim("res:kept")
            daemon.kill()
            with sqlite3.connect(mesh_env.state_dir / "test.sqlite3") as db:
                db.execute("DELETE FROM claims WHERE resource = 'res:gone'")
            daemon.start()
            wait_for(lambda: seen)

            assert gone.lost
            assert not kept.lost
            assert "restored the session" in seen[0]
            assert f"res:gone (token {gone.token})" in seen[0]
            assert "res:kept" not in seen[0]
        mesh.close()
