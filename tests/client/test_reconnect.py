"""After the daemon dies (kill -9) and comes back, the client carries on and says what was lost."""

from __future__ import annotations

from typing import Any

from tests.support import wait_for

from meshctl import Mesh


class TestDaemonRestart:
    def test_plain_calls_reconnect(self, daemon: Any) -> None:
        """A kept connection to a killed daemon is replaced on the next call."""
        mesh = Mesh(autostart=False)
        before = mesh.info()["pid"]
        daemon.kill()
        daemon.start()

        after = mesh.info()["pid"]
        mesh.close()

        assert before != after == daemon.proc.pid
        assert mesh.daemon[0] == after

    def test_session_survives_kill_9(self, daemon: Any) -> None:
        """The session heartbeats again after kill -9 and a restart, under the same id.

        The daemon restores heartbeat sessions from SQLite (SPEC §8), so nothing was
        lost and ``lost`` stays empty; the client re-registered on the new daemon.
        """
        mesh = Mesh(autostart=False)
        with mesh.session(task="long job", source="worker") as s:
            assert s.wait_beats(1, 5)
            first_daemon = mesh.daemon
            daemon.kill()
            daemon.start()
            beats = s.beats
            assert s.wait_beats(beats + 2, 5)
            listed = {x["session_id"]: x for x in mesh.sessions()}

        assert mesh.daemon != first_daemon
        assert s._core.daemon == mesh.daemon
        assert listed[s.session_id]["task"] == "long job"
        assert s.lost == []
        mesh.close()

    def test_session_lost_when_state_is_gone(self, daemon: Any, mesh_env: Any) -> None:
        """A daemon that comes back without the session: re-registered, and the loss recorded."""
        seen: list[str] = []
        mesh = Mesh(autostart=False)
        with mesh.session(task="t", on_lost=seen.append) as s:
            c = s.claim("res:gone")
            assert s.wait_beats(1, 5)
            daemon.kill()
            for f in mesh_env.state_dir.glob("test.sqlite3*"):
                f.unlink()
            daemon.start()
            wait_for(lambda: s.lost)
            listed = {x["session_id"] for x in mesh.sessions()}

        assert s.session_id in listed
        assert seen == s.lost
        assert "restarted" in s.lost[0]
        assert f"claims it held were released: res:gone (token {c.token})" in s.lost[0]
        assert c.lost
        mesh.close()
