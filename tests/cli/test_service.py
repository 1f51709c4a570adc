"""``meshctl service install|uninstall|status``: unit files that work as shipped.

The user service manager itself cannot run in CI's container (no systemd user
instance), so the files are checked with systemd's own verifier and plistlib, and
the manager's commands are checked through a stand-in ``systemctl`` on ``PATH``
that records what it was asked (the daemon it hands over from is the real one).
"""

from __future__ import annotations

import os
import plistlib
import shutil
import stat
import subprocess
import xml.dom.minidom
from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import Meshctl

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "src" / "meshctl" / "units"


@pytest.fixture
def svc_env(short_tmp: Path, mesh_env: Any) -> dict[str, str]:
    """meshctl's environment with its own config/home folders and no service manager."""
    env = dict(mesh_env.env)
    env.update(
        XDG_CONFIG_HOME=str(short_tmp / "cfg"),
        HOME=str(short_tmp / "home"),
        MESH_SERVICE_MANAGER="none",
    )
    return env


@pytest.fixture
def plain_env(svc_env: dict[str, str]) -> dict[str, str]:
    """``svc_env`` as a person's shell has it: no MESH_CONFIG, MESH_STATE_DIR, MESH_SOCKET."""
    return {k: v for k, v in svc_env.items() if k not in OVERRIDES}


OVERRIDES = ("MESH_CONFIG", "MESH_STATE_DIR", "MESH_SOCKET")


def unit_dir(env: dict[str, str]) -> Path:
    return Path(env["XDG_CONFIG_HOME"]) / "systemd" / "user"


def verify(
    files: list[Path], runtime: Path, *, instance: str = "ci"
) -> subprocess.CompletedProcess[str]:
    """``systemd-analyze verify --user`` over instance copies of the template files (named
    by path, or by name with their folder as the unit path, so its drop-ins are read)."""
    inst = []
    for f in files:
        copy = f.with_name(f.name.replace("@.", f"@{instance}."))
        shutil.copyfile(f, copy)
        inst.append(str(copy) if instance == "ci" else copy.name)
    return subprocess.run(
        ["systemd-analyze", "verify", "--user", *inst],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "XDG_RUNTIME_DIR": str(runtime),
            "SYSTEMD_UNIT_PATH": f"{files[0].parent}:",
        },
        check=False,
    )


needs_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)


class TestSystemd:
    @needs_analyze
    def test_rendered_units_pass_systemd_verify(
        self, meshctl: Meshctl, plain_env: dict[str, str], short_tmp: Path
    ) -> None:
        """The rendered pair passes `systemd-analyze verify`; the raw template does not."""
        svc_env = plain_env
        r = meshctl("service", "install", "--systemd", "--json", env=svc_env)

        assert r.code == 0, r
        doc = r.json()
        folder = unit_dir(svc_env)
        assert sorted(doc["files"]) == sorted(
            str(folder / n) for n in ("meshd@.socket", "meshd@.service")
        )
        assert doc["todo"] == [
            "systemctl --user daemon-reload",
            "systemctl --user enable --now meshd@test.socket",
        ]
        service = (folder / "meshd@.service").read_text()
        exec_start = next(x for x in service.splitlines() if x.startswith("ExecStart="))
        meshd = exec_start.split("=", 1)[1].split()[0]
        assert os.path.isabs(meshd)
        assert os.access(meshd, os.X_OK)
        assert "@MESHD@" not in service
        done = verify([folder / "meshd@.service", folder / "meshd@.socket"], short_tmp)
        assert done.returncode == 0, done.stderr
        raw = short_tmp / "raw"
        raw.mkdir()
        shutil.copy(UNITS / "systemd" / "meshd@.service", raw)
        shutil.copy(UNITS / "systemd" / "meshd@.socket", raw)
        bad = verify([raw / "meshd@.service", raw / "meshd@.socket"], short_tmp)
        assert bad.returncode != 0
        assert "MESHD@" in bad.stderr

    def test_socket_unit_is_private(self) -> None:
        """The shipped socket unit sets 0600/0700 (systemd's defaults are 0666/0755)."""
        text = (UNITS / "systemd" / "meshd@.socket").read_text()

        assert "SocketMode=0600" in text
        assert "DirectoryMode=0700" in text
        assert "ListenStream=%t/meshd/%i.sock" in text

    def test_refuses_to_overwrite_a_foreign_unit(
        self, meshctl: Meshctl, svc_env: dict[str, str]
    ) -> None:
        """A unit file meshctl did not write is left as it is, and the install says why."""
        folder = unit_dir(svc_env)
        folder.mkdir(parents=True)
        (folder / "meshd@.service").write_text("[Service]\nExecStart=/bin/mine\n")

        r = meshctl("service", "install", "--json", env=svc_env)

        assert r.code == 1, r
        assert r.json()["error"]["data"]["code"] == "SERVICE_REFUSED"
        assert "was not written by meshctl" in r.err
        assert not (folder / "meshd@.socket").exists()
        assert (folder / "meshd@.service").read_text() == "[Service]\nExecStart=/bin/mine\n"

    def test_install_twice_is_up_to_date(self, meshctl: Meshctl, svc_env: dict[str, str]) -> None:
        """A second install rewrites nothing and says so."""
        assert meshctl("service", "install", env=svc_env).code == 0

        r = meshctl("service", "install", "--json", env=svc_env)

        assert r.code == 0, r
        assert r.json()["files"] == []
        assert any("up to date" in n for n in r.json()["notes"])

    def test_status_flags_an_outdated_copy(self, meshctl: Meshctl, svc_env: dict[str, str]) -> None:
        """After an upgrade the files carry the old version: status says so, install fixes it."""
        assert meshctl("service", "install", env=svc_env).code == 0
        path = unit_dir(svc_env) / "meshd@.service"
        text = path.read_text()
        head, rest = text.split("\n", 1)
        path.write_text(head.replace("(session-mesh ", "(session-mesh 0.0.1-old ") + "\n" + rest)
        old = path.read_text().split("(session-mesh ")[1].split(")")[0]

        r = meshctl("service", "status", "--json", env=svc_env)

        assert r.code == 0, r
        doc = r.json()
        assert doc["installed"] is True
        assert doc["current"] is False
        stale = next(f for f in doc["files"] if f["path"] == str(path))
        assert stale["version"] == old
        human = meshctl("service", "status", env=svc_env)
        assert "outdated" in human.out
        assert meshctl("service", "install", env=svc_env).code == 0
        assert meshctl("service", "status", "--json", env=svc_env).json()["current"] is True

    def test_uninstall_removes_only_its_files_and_keeps_state(
        self, meshctl: Meshctl, svc_env: dict[str, str], mesh_env: Any
    ) -> None:
        """Uninstall removes the managed units, leaves foreign files and the state folder."""
        assert meshctl("service", "install", env=svc_env).code == 0
        folder = unit_dir(svc_env)
        (folder / "other.service").write_text("[Service]\nExecStart=/bin/true\n")
        mesh_env.state_dir.mkdir(exist_ok=True)
        keep = mesh_env.state_dir / "test.sqlite3"
        keep.write_bytes(b"not touched")

        r = meshctl("service", "uninstall", "--json", env=svc_env)

        assert r.code == 0, r
        assert not (folder / "meshd@.service").exists()
        assert not (folder / "meshd@.socket").exists()
        assert (folder / "other.service").exists()
        assert keep.read_bytes() == b"not touched"
        assert meshctl("service", "status", "--json", env=svc_env).json()["installed"] is False


class TestEnvironment:
    """MESH_CONFIG, MESH_STATE_DIR and MESH_SOCKET set where ``service install`` runs: the
    service gets them too (a drop-in per profile; the LaunchAgent's EnvironmentVariables),
    so the daemon it runs reads the config, state and socket this shell's meshctl does."""

    @needs_analyze
    def test_systemd_drop_ins_carry_the_environment(
        self, meshctl: Meshctl, svc_env: dict[str, str], short_tmp: Path
    ) -> None:
        odd = short_tmp / "my 100% cfg" / "config.toml"
        env = {**svc_env, "MESH_CONFIG": str(odd)}

        r = meshctl("service", "install", "--systemd", "--json", env=env)

        assert r.code == 0, r
        folder = unit_dir(env)
        service_in = folder / "meshd@test.service.d" / "50-meshctl-environment.conf"
        socket_in = folder / "meshd@test.socket.d" / "50-meshctl-environment.conf"
        assert sorted(r.json()["files"]) == sorted(
            str(p)
            for p in (folder / "meshd@.socket", folder / "meshd@.service", service_in, socket_in)
        )
        text = service_in.read_text()
        assert "Managed by meshctl service install" in text.splitlines()[0]
        assert f'"MESH_CONFIG={short_tmp}/my 100%% cfg/config.toml"' in text
        assert f'"MESH_STATE_DIR={env["MESH_STATE_DIR"]}"' in text
        assert f'"MESH_SOCKET={env["MESH_SOCKET"]}"' in text
        assert f"ListenStream=\nListenStream={env['MESH_SOCKET']}\n" in socket_in.read_text()
        assert any("MESH_CONFIG" in n and "unset" in n for n in r.json()["notes"]), r
        done = verify([folder / "meshd@.service", folder / "meshd@.socket"], short_tmp,
                      instance="test")  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "50-meshctl-environment" not in done.stderr, done.stderr

    def test_unset_again_the_drop_ins_go(
        self, meshctl: Meshctl, svc_env: dict[str, str], plain_env: dict[str, str]
    ) -> None:
        """Installed again from a shell without them, the service is back on the defaults;
        uninstall removes what it wrote."""
        plain = {**plain_env, "MESH_PROFILE": "test"}
        assert meshctl("service", "install", env=svc_env).code == 0
        dropins = sorted(unit_dir(svc_env).glob("meshd@test.*.d/*"))
        assert len(dropins) == 2

        again = meshctl("service", "install", "--json", env=plain)
        removed = meshctl("service", "uninstall", "--json", env=svc_env)

        assert again.code == 0, again
        assert not any(p.exists() for p in dropins)
        assert again.json()["files"] == []
        notes = " ".join(again.json()["notes"])
        assert all(f"removed {p}: none of its variables is set here" in notes for p in dropins)
        assert removed.code == 0, removed
        assert list(unit_dir(svc_env).iterdir()) == []

    def test_uninstall_removes_the_drop_ins(
        self, meshctl: Meshctl, svc_env: dict[str, str]
    ) -> None:
        assert meshctl("service", "install", env=svc_env).code == 0

        r = meshctl("service", "uninstall", env=svc_env)

        assert r.code == 0, r
        assert list(unit_dir(svc_env).iterdir()) == []

    def test_a_path_with_a_newline_is_refused(
        self, meshctl: Meshctl, svc_env: dict[str, str]
    ) -> None:
        """A line break would end the unit's line and start another: refused, nothing written."""
        env = {**svc_env, "MESH_STATE_DIR": "/tmp/a\nExecStartPre=/bin/false"}

        r = meshctl("service", "install", env=env)

        assert r.code == 1, r
        assert "MESH_STATE_DIR holds a control character" in r.err
        assert not unit_dir(env).exists()

    def test_launchd_environment_variables(self, meshctl: Meshctl, svc_env: dict[str, str]) -> None:
        r = meshctl("service", "install", "--launchd", "--json", env=svc_env)

        assert r.code == 0, r
        (path,) = r.json()["files"]
        with open(path, "rb") as f:
            plist = plistlib.load(f)
        assert plist["EnvironmentVariables"] == {k: svc_env[k] for k in OVERRIDES}
        assert plist["StandardErrorPath"] == str(Path(svc_env["MESH_STATE_DIR"]) / "test.log")


def fake_systemctl(bin_dir: Path, log: Path) -> None:
    """A stand-in for systemd's ``systemctl`` that records its arguments and succeeds."""
    bin_dir.mkdir()
    script = bin_dir / "systemctl"
    script.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexit 0\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


class TestHandOver:
    def test_install_stops_the_detached_daemon_and_keeps_its_sessions(
        self, meshctl: Meshctl, svc_env: dict[str, str], daemon: Any, short_tmp: Path
    ) -> None:
        """With a manager answering, the running daemon is stopped before the unit starts,
        and the sessions it held are restored by the next daemon of the profile."""
        env = dict(svc_env)
        env.pop("MESH_SERVICE_MANAGER")
        log = short_tmp / "systemctl.log"
        fake_systemctl(short_tmp / "bin", log)
        env["PATH"] = f"{short_tmp / 'bin'}:{env['PATH']}"
        sid = meshctl(
            "register", "--task", "survives the hand-over", "--liveness", "heartbeat", env=env
        ).out.strip()
        assert sid
        old = daemon.proc
        assert old is not None

        r = meshctl("service", "install", "--json", env=env)

        assert r.code == 0, r
        doc = r.json()
        assert old.wait(timeout=10) == 0
        assert any(f"pid {old.pid}" in n for n in doc["notes"])
        assert doc["ran"] == [
            "systemctl --user daemon-reload",
            "systemctl --user enable --now meshd@test.socket",
        ]
        assert "show-environment" in log.read_text()
        daemon.start()
        listed = meshctl("sessions", "active", "--json", env=env).json()
        assert sid in [s["session_id"] for s in listed]


class TestLaunchd:
    def test_template_is_well_formed(self) -> None:
        """The shipped plist template parses as XML (no `--` inside a comment)."""
        xml.dom.minidom.parse(str(UNITS / "launchd" / "meshd.plist.in"))

    def test_rendered_plist_has_what_launchd_needs(
        self, meshctl: Meshctl, svc_env: dict[str, str]
    ) -> None:
        """Label = file name, absolute ProgramArguments, restart on crash only, a log."""
        r = meshctl("service", "install", "--launchd", "--profile", "work", "--json", env=svc_env)

        assert r.code == 0, r
        (path,) = r.json()["files"]
        assert path.endswith("Library/LaunchAgents/org.sessionmesh.meshd.work.plist")
        with open(path, "rb") as f:
            plist = plistlib.load(f)
        assert plist["Label"] == "org.sessionmesh.meshd.work"
        assert Path(path).name == plist["Label"] + ".plist"
        argv = plist["ProgramArguments"]
        assert os.path.isabs(argv[0])
        assert os.access(argv[0], os.X_OK)
        assert argv[1:] == ["run", "--profile", "work"]
        assert plist["RunAtLoad"] is True
        assert plist["KeepAlive"] == {"SuccessfulExit": False}
        assert os.path.isabs(plist["StandardErrorPath"])
        assert r.json()["todo"] == [f"launchctl bootstrap gui/{os.getuid()} {path}"]


@pytest.mark.slow
def test_wheel_ships_the_unit_files(short_tmp: Path) -> None:
    """`pip wheel .` carries the systemd and launchd templates as package data."""
    import sys
    import zipfile

    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(short_tmp), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = short_tmp.glob("session_mesh-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for name in (
        "meshctl/units/systemd/meshd@.service",
        "meshctl/units/systemd/meshd@.socket",
        "meshctl/units/launchd/meshd.plist.in",
    ):
        assert name in names
