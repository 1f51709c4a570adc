"""The blocking client against the real daemon on a real socket."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import pytest
from tests.support import wait_for

from meshctl import FrameTooLarge, Mesh, MeshError, MeshUnavailable

from .conftest import HEARTBEAT


class TestCalls:
    def test_ping_info_sessions(self, daemon: Any) -> None:
        """Plain calls answer; info passes the protocol check; no sessions yet."""
        with Mesh() as mesh:
            pong = mesh.ping()
            info = mesh.info()
            sessions = mesh.sessions()

        assert pong["pong"] is True
        assert info["protocol_version"].startswith("1.")
        assert info["pid"] == daemon.proc.pid
        assert mesh.daemon == (info["pid"], info["started_at"])
        assert sessions == []

    def test_error_reply_raises_its_class(self, daemon: Any) -> None:
        """A daemon error comes back as the class for its data.code; the link stays usable."""
        with Mesh() as mesh:
            with pytest.raises(MeshError) as info:
                mesh.call("no.such.method")
            pong = mesh.ping()

        assert info.value.data["code"] == "METHOD_NOT_FOUND"
        assert pong["pong"] is True

    def test_calls_from_many_threads(self, daemon: Any) -> None:
        """Calls from several threads share one connection and each gets its own reply."""
        mesh = Mesh()
        results: list[Any] = []

        def work() -> None:
            results.extend(mesh.call("mesh.ping") for _ in range(50))

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        mesh.close()

        assert len(results) == 200
        assert all(r["pong"] is True for r in results)

    def test_big_frame_refused_before_sending(self, daemon: Any) -> None:
        """A request over 1 MiB raises FrameTooLarge and the connection keeps working."""
        with Mesh() as mesh:
            mesh.ping()
            with pytest.raises(FrameTooLarge, match="1 MiB"):
                mesh.call("mesh.ping", {"pad": "x" * (1 << 20)})
            assert mesh.ping()["pong"] is True

    def test_closed_mesh_refuses(self, daemon: Any) -> None:
        """A closed Mesh cannot be reused."""
        mesh = Mesh()
        mesh.close()

        with pytest.raises(MeshError, match="closed"):
            mesh.ping()

    def test_stale_socket_file_no_daemon(self, mesh_env: Any) -> None:
        """No daemon and autostart off: MeshUnavailable saying how to start one."""
        with pytest.raises(MeshUnavailable, match="meshctl daemon start"):
            Mesh(autostart=False).ping()


class TestSession:
    def test_lifecycle(self, daemon: Any) -> None:
        """A session registers with pid and cwd, heartbeats in the background, ends on exit."""
        mesh = Mesh()
        with mesh.session(task="refactor auth", source="cli", model="m1") as s:
            assert s.wait_beats(2, 5)
            listed = {x["session_id"]: x for x in mesh.sessions()}
            s.heartbeat(status="tool-running", task="running tests")
            shown = mesh.call("session.get", {"session_id": s.session_id})

        assert s.heartbeat_interval == HEARTBEAT
        me = listed[s.session_id]
        assert (me["pid"], me["cwd"], me["source"], me["task"]) == (
            os.getpid(),
            os.getcwd(),
            "cli",
            "refactor auth",
        )
        assert (shown["status"], shown["task"]) == ("tool-running", "running tests")
        assert s.lost == []
        assert mesh.sessions() == []
        mesh.close()

    def test_given_id_and_handoff(self, daemon: Any) -> None:
        """A caller-chosen id is kept; end() with a handoff reports it ended."""
        with Mesh() as mesh:
            s = mesh.session(task="t", session_id="worker:abc").start()
            ended = s.end(handoff="done with A, B next")

        assert s.session_id == "worker:abc"
        assert ended["ended"] is True
        assert s.end() is None  # idempotent

    def test_ended_behind_its_back(self, daemon: Any) -> None:
        """Ended by someone else: the next heartbeat re-registers and records the loss."""
        seen: list[str] = []
        with Mesh() as mesh, mesh.session(task="t", on_lost=seen.append) as s:
            c = s.claim("res:behind")
            daemon.call("session.end", {"session_id": s.session_id})
            wait_for(lambda: s.lost)
            again = {x["session_id"] for x in mesh.sessions()}

        assert s.session_id in again
        assert seen == s.lost
        assert "re-registered" in s.lost[0]
        assert f"claims it held were released: res:behind (token {c.token})" in s.lost[0]
        assert c.lost

    def test_exit_when_daemon_gone(self, daemon: Any, caplog: pytest.LogCaptureFixture) -> None:
        """Leaving the block while the daemon is down warns instead of raising."""
        mesh = Mesh(autostart=False)
        with caplog.at_level(logging.WARNING, "meshctl"), mesh.session(task="t") as s:
            daemon.kill()

        assert not s.active
        assert any("could not end session" in r.message for r in caplog.records)
        mesh.close()

    @pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
    def test_forked_child_gets_its_own_connection(self, daemon: Any) -> None:
        """After fork, the child reconnects instead of sharing the parent's socket."""
        mesh = Mesh(autostart=False)
        mesh.ping()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            code = 0 if mesh.ping()["pong"] else 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        pong = mesh.ping()
        mesh.close()

        assert os.waitstatus_to_exitcode(status) == 0
        assert pong["pong"] is True


class TestDisabled:
    def test_disabled_session_is_a_noop(
        self, daemon: Any, mesh_env: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        """With enabled = false the session says so once and does nothing."""
        mesh_env.write_config("[defaults]\nenabled = false\n")
        daemon.restart()

        mesh = Mesh()
        with caplog.at_level(logging.WARNING, "meshctl"), mesh.session(task="t") as s:
            beat = s.heartbeat(status="thinking")
        mesh.close()

        assert s.disabled
        assert beat is None
        assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
        assert "disabled" in caplog.records[0].message


class TestFailOpen:
    def test_unreachable_then_back(self, daemon: Any, caplog: pytest.LogCaptureFixture) -> None:
        """fail_open: calls return None and warn once; once the daemon is back they answer."""
        daemon.stop()
        mesh = Mesh(autostart=False, fail_open=True)

        with caplog.at_level(logging.WARNING, "meshctl"):
            first, second = mesh.ping(), mesh.ping()
            s = mesh.session(task="t").start()
            daemon.start()
            back = wait_for(mesh.ping)
            registered = wait_for(lambda: s.active)
        listed = {x["session_id"] for x in mesh.sessions()}
        s.end()
        mesh.close()

        assert (first, second) == (None, None)
        warnings = [r.message for r in caplog.records if "unreachable" in r.message]
        assert len(warnings) == 1
        assert back["pong"] is True
        assert registered
        assert s.session_id in listed
