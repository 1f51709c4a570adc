"""``meshctl doctor``: each fault is reported with the command that fixes it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import Meshctl


@pytest.fixture
def doc_env(short_tmp: Path, mesh_env: Any) -> dict[str, str]:
    env = dict(mesh_env.env)
    env.update(
        XDG_CONFIG_HOME=str(short_tmp / "cfg"),
        HOME=str(short_tmp / "home"),
        MESH_SERVICE_MANAGER="none",
        MESH_SPAWN="direct",
    )
    return env


def by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in doc["checks"]}


class TestDoctor:
    def test_all_well_with_a_running_daemon(
        self, meshctl: Meshctl, doc_env: dict[str, str], daemon: Any
    ) -> None:
        """A running daemon, default config: exit 0; no service is only a warning."""
        r = meshctl("doctor", "--json", env=doc_env)

        assert r.code == 0, r
        checks = by_name(r.json())
        assert r.json()["ok"] is True
        assert checks["daemon"]["status"] == "ok"
        assert checks["version"]["status"] == "ok"
        assert checks["socket"]["status"] == "ok"
        assert checks["database"]["status"] == "ok"
        assert "integrity ok" in checks["database"]["message"]
        assert checks["service"]["status"] == "warn"
        assert checks["service"]["fix"] == "meshctl service install --profile test"
        human = meshctl("doctor", env=doc_env).out
        rows = [line for line in human.splitlines() if line.startswith("  [")]
        assert any("] connections " in row for row in rows), human
        message = {len(row) - len(row[9:].lstrip().split(" ", 1)[1].lstrip()) for row in rows}
        assert len(message) == 1, human  # every message starts in one column
        fix = next(line for line in human.splitlines() if "fix: " in line)
        assert fix.index("fix: ") == message.pop(), human

    def test_warnings_are_counted_not_called_well(
        self, meshctl: Meshctl, doc_env: dict[str, str], daemon: Any
    ) -> None:
        """Under ``[warn]`` lines (here no service installed) doctor still exits 0, but
        its last line counts the warnings instead of "All is well." (it said that under
        every warning)."""
        warned = [c["name"] for c in meshctl("doctor", "--json", env=doc_env).json()["checks"]
                  if c["status"] == "warn"]  # fmt: skip
        human = meshctl("doctor", env=doc_env)
        n = len(warned)

        assert "service" in warned
        assert human.code == 0, human
        assert "All is well" not in human.out
        assert human.out.rstrip().splitlines()[-1] == (
            f"{n} warning{'s' if n > 1 else ''} ({', '.join(warned)}); nothing failed."
        )

    def test_no_daemon_yet_is_information(self, meshctl: Meshctl, doc_env: dict[str, str]) -> None:
        """A fresh install, no daemon yet: exit 0 (the first command that needs one starts
        it, SPEC §9), the daemon check says so as information; none is started. It was
        exit 1 with "FAIL daemon", right after installing."""
        r = meshctl("doctor", "--json", env=doc_env)

        assert r.code == 0, r
        assert r.json()["ok"] is True
        checks = by_name(r.json())
        assert checks["daemon"]["status"] == "info"
        assert "no daemon runs yet" in checks["daemon"]["message"]
        assert "meshctl daemon start --profile test" in checks["daemon"]["message"]
        assert checks["socket"]["status"] == "ok"
        assert not any(c["status"] == "fail" for c in checks.values()), checks
        assert not Path(doc_env["MESH_SOCKET"]).exists()
        human = meshctl("doctor", env=doc_env)
        assert human.code == 0, human
        assert "FAIL" not in human.out
        assert "[info] daemon      no daemon runs yet" in human.out
        assert human.out.rstrip().endswith(("All is well.", "; nothing failed."))

    def test_a_stopped_daemon_is_information_too(
        self, meshctl: Meshctl, doc_env: dict[str, str], daemon: Any
    ) -> None:
        """After `daemon stop` (or a daemon that died: nothing listens at the socket), the
        next command starts one: exit 0, as on a fresh install."""
        daemon.kill()

        r = meshctl("doctor", "--json", env=doc_env)

        assert r.code == 0, r
        assert by_name(r.json())["daemon"]["status"] == "info"

    def test_no_daemon_and_a_broken_config_fails(
        self, meshctl: Meshctl, doc_env: dict[str, str], mesh_env: Any
    ) -> None:
        """No daemon is information only while one could start: a config the daemon
        would refuse fails its check (exit 1)."""
        mesh_env.write_config("[defaults]\nstale_after = 'soon'\n")

        r = meshctl("doctor", "--json", env=doc_env)

        assert r.code == 1, r
        checks = by_name(r.json())
        assert checks["daemon"]["status"] == "info"
        assert checks["config"]["status"] == "fail"

    def test_a_heartbeat_interval_not_below_stale_after_is_a_warning(
        self, meshctl: Meshctl, doc_env: dict[str, str], mesh_env: Any
    ) -> None:
        """``heartbeat_interval = 30`` with the default ``stale_after = 20`` is a valid
        file, but every session that heartbeats as told is listed ``[stale]`` for a
        third of each interval; doctor called the file valid, no more (fails before).
        A warning, with the fix; exit 0 (nothing failed)."""
        mesh_env.write_config("[defaults]\nheartbeat_interval = 30\n")

        r = meshctl("doctor", "--json", env=doc_env)

        assert r.code == 0, r
        cfg = by_name(r.json())["config"]
        assert cfg["status"] == "warn", cfg
        assert "heartbeat_interval (30 s) is not below stale_after (20 s)" in cfg["message"]
        assert cfg["fix"].startswith("raise stale_after well above heartbeat_interval"), cfg

    def test_a_daemon_that_does_not_answer_fails(
        self, meshctl: Meshctl, doc_env: dict[str, str], daemon: Any
    ) -> None:
        """A daemon is there but answers nothing (SIGSTOP): that is a fault, not "none
        yet" (a command would wait on it, not start another): exit 1."""
        os.kill(daemon.proc.pid, signal.SIGSTOP)
        try:
            r = meshctl("doctor", "--json", env=doc_env)
        finally:
            os.kill(daemon.proc.pid, signal.SIGCONT)

        assert r.code == 1, r
        assert by_name(r.json())["daemon"]["status"] == "fail"

    def test_wrong_socket_folder_mode(
        self, meshctl: Meshctl, doc_env: dict[str, str], daemon: Any
    ) -> None:
        """A socket folder others can read is named, with the chmod that fixes it."""
        folder = Path(doc_env["MESH_SOCKET"]).parent
        os.chmod(folder, 0o755)
        try:
            r = meshctl("doctor", "--json", env=doc_env)
        finally:
            os.chmod(folder, 0o700)

        assert r.code == 1, r
        sock = by_name(r.json())["socket"]
        assert sock["status"] == "fail"
        assert "0755" in sock["message"]
        assert sock["fix"] == f"chmod 0700 '{folder}'"

    def test_broken_config_reports_this_load(
        self, meshctl: Meshctl, doc_env: dict[str, str], daemon: Any, mesh_env: Any
    ) -> None:
        """A config broken after start: the error of this load, naming file and key."""
        mesh_env.write_config("[defaults]\nstale_after = 'soon'\n")

        r = meshctl("doctor", "--json", env=doc_env)

        assert r.code == 1, r
        cfg = by_name(r.json())["config"]
        assert cfg["status"] == "fail"
        assert str(mesh_env.config) in cfg["message"]
        assert "stale_after" in cfg["message"]
        assert cfg["fix"] == f"fix {mesh_env.config}, then: meshctl daemon reload"

    def test_outdated_service_files(
        self, meshctl: Meshctl, doc_env: dict[str, str], daemon: Any
    ) -> None:
        """Unit files from another version fail the service check; install is the fix."""
        assert meshctl("service", "install", env=doc_env).code == 0
        unit = Path(doc_env["XDG_CONFIG_HOME"]) / "systemd" / "user" / "meshd@.service"
        head, rest = unit.read_text().split("\n", 1)
        unit.write_text(head.replace("(session-mesh ", "(session-mesh 0.0.0-old") + "\n" + rest)

        r = meshctl("doctor", "--json", env=doc_env)

        assert r.code == 1, r
        svc = by_name(r.json())["service"]
        assert svc["status"] == "fail"
        assert svc["fix"] == "meshctl service install --profile test"

    def test_service_files_without_a_manager(
        self, meshctl: Meshctl, doc_env: dict[str, str], daemon: Any
    ) -> None:
        """Files written where no service manager answers (a container, no user session):
        `service install` printed the commands to finish; doctor said "[ok] systemd
        service installed" though nothing uses the files. A warning, with those commands."""
        assert meshctl("service", "install", env=doc_env).code == 0

        r = meshctl("doctor", "--json", env=doc_env)

        assert r.code == 0, r
        svc = by_name(r.json())["service"]
        assert svc["status"] == "warn", svc
        assert "does not answer" in svc["message"]
        assert svc["fix"] == (
            "systemctl --user daemon-reload && systemctl --user enable --now meshd@test.socket"
        )

    def test_corrupt_database(
        self, meshctl: Meshctl, doc_env: dict[str, str], mesh_env: Any
    ) -> None:
        """A database that is not SQLite: fail, with the stop-and-move-aside commands."""
        mesh_env.state_dir.mkdir(mode=0o700, exist_ok=True)
        db = mesh_env.state_dir / "test.sqlite3"
        db.write_bytes(b"this is not a database" * 100)

        r = meshctl("doctor", "--json", env=doc_env)

        assert r.code == 1, r
        check = by_name(r.json())["database"]
        assert check["status"] == "fail"
        assert f"mv '{db}' '{db}.broken'" in check["fix"]


def _mount(*args: str) -> None:
    out = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        pytest.skip(f"mount {' '.join(args)} failed here: {out.stderr.strip()}")


@pytest.fixture
def tiny_state(mesh_env: Any) -> Iterator[Path]:
    """A 4 MiB tmpfs as the profile's state folder (root only), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs as the state folder needs root")
    state = mesh_env.state_dir
    state.mkdir(mode=0o700)
    _mount("-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(state))
    yield state
    subprocess.run(["umount", "-l", str(state)], check=False)


class TestStateFolder:
    """The state folder must be writable and have room: doctor said "All is well" on a
    full disk (where the daemon acknowledges nothing) and on a read-only folder (where
    it cannot start, so the daemon check's fix could not work)."""

    def test_writable_with_room(self, meshctl: Meshctl, doc_env: dict[str, str]) -> None:
        r = meshctl("doctor", "--json", env=doc_env)

        check = by_name(r.json())["state"]
        assert check["status"] == "ok", check
        assert "free" in check["message"]

    def test_full_disk(self, meshctl: Meshctl, doc_env: dict[str, str], tiny_state: Path) -> None:
        before = meshctl("doctor", "--json", env=doc_env)
        filler = (tiny_state / "filler").open("wb", buffering=0)
        with filler, contextlib.suppress(OSError):  # until ENOSPC: full
            while True:
                filler.write(b"\0" * 65536)

        r = meshctl("doctor", "--json", env=doc_env)

        assert by_name(before.json())["state"]["status"] == "warn"  # 4 MiB: nearly full
        assert r.code == 1, r
        check = by_name(r.json())["state"]
        assert check["status"] == "fail", check
        assert f"the disk of {tiny_state} is full" in check["message"]
        assert f"df -h '{tiny_state}'" in check["fix"]

    def test_read_only_folder(
        self, meshctl: Meshctl, doc_env: dict[str, str], tiny_state: Path
    ) -> None:
        _mount("-o", "remount,ro", str(tiny_state))

        r = meshctl("doctor", "--json", env=doc_env)

        assert r.code == 1, r
        check = by_name(r.json())["state"]
        assert check["status"] == "fail", check
        assert "read-only file system" in check["message"]
        assert "MESH_STATE_DIR" in check["fix"]

    def test_a_full_disk_from_the_command_line(
        self, meshctl: Meshctl, doc_env: dict[str, str], tiny_state: Path, daemon: Any
    ) -> None:
        """A change the full disk refuses: exit 1, one sentence, a hint that says nothing
        changed and where to look (there was none); doctor names the full disk; reads go
        on (SPEC §8), a peek at the inbox too (it failed: a peek stores that the items
        were seen); nothing acknowledged is lost."""
        env = daemon.env
        a = meshctl("register", "--task", "a", "--liveness", "heartbeat", env=env).out.strip()
        b = meshctl("register", "--task", "b", "--liveness", "heartbeat", env=env).out.strip()
        assert meshctl("send", "--session", a, b, "before the disk filled", env=env).code == 0
        filler = (tiny_state / "filler").open("wb", buffering=0)
        with filler, contextlib.suppress(OSError):  # until ENOSPC: full
            while True:
                filler.write(b"\0" * 65536)

        refused = meshctl("send", "--session", a, b, "after", env=env)
        peek = meshctl("inbox", "--peek", "--json", "--session", b, env=env)
        doctor = meshctl("doctor", "--json", env=doc_env)
        (tiny_state / "filler").unlink()
        after = meshctl("inbox", "--json", "--session", b, env=env)

        assert refused.code == 1, refused
        first, hint = refused.err.splitlines()
        assert first.startswith("meshctl: the database could not store this change")
        assert "meshctl doctor" in hint
        assert peek.code == 0, peek
        assert [i["text"] for i in peek.json()] == ["before the disk filled"]
        assert by_name(doctor.json())["state"]["status"] == "fail"
        assert [i["text"] for i in after.json()] == ["before the disk filled"]
