"""``meshctl`` where no daemon runs: refusals, usage errors, exit 69, import weight."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from meshctl.cli import cli
from meshctl.cli._context import State

from .conftest import Meshctl, OfflineEnv

HEAVY = ("anyio", "msgspec", "platformdirs")


class TestNoSession:
    def test_heartbeat_refuses_and_says_how(
        self, meshctl: Meshctl, offline_env: OfflineEnv
    ) -> None:
        """Without --session/MESH_SESSION, heartbeat exits 1 and shows how to get one."""
        run = meshctl("heartbeat", env=offline_env.env)

        assert run.code == 1, run
        assert run.out == ""
        assert "export MESH_SESSION=$(meshctl register --task" in run.err

    def test_end_json_error_document(self, meshctl: Meshctl, offline_env: OfflineEnv) -> None:
        """Under --json the refusal is one error document with data.code NO_SESSION."""
        run = meshctl("end", "--json", env=offline_env.env)

        assert run.code == 1, run
        assert run.json()["error"]["data"]["code"] == "NO_SESSION"
        assert run.json()["error"]["code"] == -32004
        assert "none was given" in run.err


class TestUsage:
    def test_bad_params_json(self, meshctl: Meshctl, offline_env: OfflineEnv) -> None:
        """call with broken JSON is a usage error (2) that says where it broke."""
        run = meshctl("call", "session.get", "{session_id:", env=offline_env.env)

        assert run.code == 2, run
        assert "PARAMS_JSON is not valid JSON" in run.err
        assert "line 1 column 2" in run.err

    @pytest.mark.parametrize(("text", "name"), [("null", "null"), ("5", "a number")])
    def test_params_not_an_object_named_as_json(
        self, meshctl: Meshctl, offline_env: OfflineEnv, text: str, name: str
    ) -> None:
        """JSON that is not params is named as JSON names it (was "not NoneType")."""
        run = meshctl("call", "mesh.ping", text, env=offline_env.env)

        assert run.code == 2, run
        assert run.err.rstrip().endswith(
            f"must be a JSON object or array (JSON-RPC params), not {name}"
        )

    def test_bad_params_from_stdin_json(self, meshctl: Meshctl, offline_env: OfflineEnv) -> None:
        """Under --json a usage error is also an error document on stdout."""
        run = meshctl("--json", "call", "mesh.info", "-", input="[1,", env=offline_env.env)

        assert run.code == 2, run
        assert run.json()["error"]["data"]["code"] == "USAGE"
        assert "stdin is not valid JSON" in run.json()["error"]["message"]

    def test_unknown_option_json(self, meshctl: Meshctl, offline_env: OfflineEnv) -> None:
        """Even a parse error of click's own yields the JSON document when --json is there."""
        run = meshctl("sessions", "active", "--json", "--bogus", env=offline_env.env)

        assert run.code == 2, run
        assert run.json()["error"]["data"]["code"] == "USAGE"
        assert "--bogus" in run.err

    def test_invalid_profile(self) -> None:
        """A profile name outside [A-Za-z0-9_.-]{1,64} is a usage error."""
        result = CliRunner().invoke(cli, ["--profile", "a b", "heartbeat"])

        assert result.exit_code == 2
        assert "A-Z a-z 0-9" in result.stderr

    def test_slot_needs_parent(self) -> None:
        """--slot without --parent is refused before anything is sent."""
        result = CliRunner().invoke(cli, ["register", "--task", "t", "--slot", "1"])

        assert result.exit_code == 2
        assert "--slot needs --parent" in result.stderr


class TestCommonOptions:
    @pytest.mark.parametrize(
        ("args", "env", "profile", "json_"),
        [
            (["heartbeat"], {}, "default", False),
            (["heartbeat"], {"MESH_PROFILE": "envp"}, "envp", False),
            (["--profile", "outer", "heartbeat"], {"MESH_PROFILE": "envp"}, "outer", False),
            (["--profile", "outer", "heartbeat", "--profile", "inner"], {}, "inner", False),
            (["heartbeat", "--json"], {}, "default", True),
            (["--json", "sessions", "--profile", "mid", "active", "--help"], {}, "mid", True),
        ],
    )
    def test_placement_and_precedence(
        self, args: list[str], env: dict[str, str], profile: str, json_: bool
    ) -> None:
        """Root options work before or after the command; command line beats environment.

        heartbeat without a session (and --help) finish before any connection is made.
        """
        state = State()
        runner = CliRunner(env={"MESH_PROFILE": None, "MESH_SESSION": None, **env})

        result = runner.invoke(cli, args, obj=state)

        assert result.exit_code == (0 if "--help" in args else 1), result.output
        assert state.profile == profile
        assert state.json is json_


class TestDaemonStatusOffline:
    def test_status_exit_69_and_starts_nothing(
        self, meshctl: Meshctl, offline_env: OfflineEnv
    ) -> None:
        """daemon status with no daemon exits 69 and leaves no daemon (or socket) behind."""
        run = meshctl("daemon", "status", "--json", env=offline_env.env)

        assert run.code == 69, run
        assert run.json()["error"]["data"]["code"] == "UNAVAILABLE"
        assert not offline_env.socket.exists()
        assert not (offline_env.state_dir / "default.log").exists()

    def test_refused_socket_folder_is_not_called_not_running(
        self, meshctl: Meshctl, offline_env: OfflineEnv
    ) -> None:
        """A socket refused before connecting (its folder open to others) is said as
        such, not as "no meshd is running" with a "start it" hint that cannot help."""
        folder = offline_env.socket.parent
        folder.mkdir(parents=True, mode=0o700)
        folder.chmod(0o755)

        run = meshctl("daemon", "status", env=offline_env.env)

        assert run.code == 69, run
        assert run.err.startswith(f"meshctl: refusing the socket {offline_env.socket}"), run
        assert "no meshd is running" not in run.err
        assert "start it" not in run.err

    def test_socket_path_too_long(self, meshctl: Meshctl, offline_env: OfflineEnv) -> None:
        """A MESH_SOCKET over sun_path's limit is named with the limit and the fix (was
        "AF_UNIX path too long; check the socket's permissions")."""
        long = offline_env.root / ("x" * 120 + ".sock")
        env = {**offline_env.env, "MESH_SOCKET": str(long)}

        runs = [meshctl(*args, env=env) for args in (["daemon", "status"], ["sessions", "active"])]

        for run in runs:
            assert run.code == 69, run
            assert run.err == (
                f"meshctl: the socket path is {len(str(long))} bytes, over the 107-byte limit "
                f"of Unix sockets: {long}; set MESH_SOCKET to a shorter path\n"
            ), run

    def test_stop_without_daemon_is_fine(self, meshctl: Meshctl, offline_env: OfflineEnv) -> None:
        """daemon stop with nothing running exits 0 with a note, and starts nothing."""
        run = meshctl("daemon", "stop", env=offline_env.env)

        assert run.code == 0, run
        assert "nothing to stop" in run.err
        assert not offline_env.socket.exists()


def imported_modules(args: list[str], env: dict[str, str], code: int) -> set[str]:
    """Top-level module names a ``meshctl`` run imported (from ``-X importtime``).

    ``code`` is the exit status the run must have, so that a run that stopped
    early (and so imported little) cannot pass for a light one.
    """
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "meshctl.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert "meshctl" in names, done.stderr[-2000:]
    assert done.returncode == code, done.stderr[-2000:]
    return names


class TestImportWeight:
    @pytest.mark.parametrize(
        ("args", "code"),
        [(["--help"], 0), (["heartbeat", "--json"], 1), (["daemon", "status", "--json"], 69)],
    )
    def test_no_heavy_imports(self, args: list[str], code: int, offline_env: OfflineEnv) -> None:
        """anyio, msgspec and platformdirs stay off the CLI's start-up path (BENCH.md)."""
        names = imported_modules(args, offline_env.env, code)

        assert names.isdisjoint(HEAVY), sorted(names & set(HEAVY))


class TestCompletion:
    def test_bash_completion_of_lazy_commands(self, offline_env: OfflineEnv) -> None:
        """_MESHCTL_COMPLETE completes commands that are only imported on use."""
        env = {
            **offline_env.env,
            "COMP_WORDS": "meshctl daemon st",
            "COMP_CWORD": "2",
            "_MESHCTL_COMPLETE": "bash_complete",
        }
        done = subprocess.run(
            [sys.executable, "-m", "meshctl.cli"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["plain,start", "plain,status", "plain,stop"]

    def test_version(self, meshctl: Meshctl) -> None:
        """-V prints the version and exits 0."""
        run = meshctl("-V")

        assert run.code == 0
        assert run.out.startswith("meshctl, version ")
