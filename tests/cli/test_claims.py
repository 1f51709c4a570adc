"""``meshctl claim/release/check/steal/log`` and ``run`` (SPEC §5, §9).

Offline parts (parsing, rendering, ``run`` without a daemon or with the mesh
disabled) and the parts through a real daemon.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.support import reaped

from meshctl import _claims
from meshctl.cli.claims import render_check, render_log
from meshctl.cli.run import expand_res

from .conftest import Meshctl, OfflineEnv, Run
from .test_with_daemon import other_daemons as _other_daemons

Daemon = Any
MeshEnv = Any


def ok(run: Run) -> Run:
    assert run.code == 0, run
    return run


def register(meshctl: Meshctl, env: dict[str, str], task: str = "t") -> str:
    """A process session tied to this test process; its id."""
    return ok(meshctl("register", "--task", task, "--pid", str(os.getpid()), env=env)).out.strip()


# --- pure parts --------------------------------------------------------------------------


class TestParsing:
    def test_variadic_res(self) -> None:
        """--res A B -- CMD means --res A --res B; nothing after -- is touched."""
        args = ["--res", "a", "b", "--wait", "1", "--", "cmd", "--res", "z"]

        assert expand_res(args) == [
            *("--res", "a", "--res", "b", "--wait", "1"),
            *("--", "cmd", "--res", "z"),
        ]


class TestRender:
    def test_check_conflict_reads_as_a_warning(self) -> None:
        """A conflict is the SPEC's sentence; a present session a notice."""
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        hhmm = time.strftime("%H:%M")  # local time of day, as people read it
        result = {
            "status": "held",
            "claims": [
                {
                    "session_id": "cli:1f3a9c",
                    "resource": "file:/home/u/project",
                    "branch": "feat/auth",
                    "since": since,
                    "reason": "refactor auth",
                }
            ],
            "present": [
                {"session_id": "tui:2", "why": "cwd", "path": "/home/u/project", "task": "docs"}
            ],
        }

        text = render_check(["file:/home/u/project"], result, home="/home/u")

        first, second = text.splitlines()
        assert first == (
            f"held: cli:1f3a9c is editing ~/project (branch feat/auth) since {hhmm} — refactor auth"
        )
        assert second == "notice: tui:2 is working in ~/project — docs"

    def test_check_free(self) -> None:
        text = render_check(["file:/home/u/p", "port:80"], {}, home="/home/u")

        assert text == "free: no other session claims or works on ~/p, port:80"

    def test_log_lines(self) -> None:
        entries = [
            {
                "at": "2026-11-29T14:02:11Z",
                "action": "steal",
                "resource": "port:8080",
                "session_id": "cli:b",
                "token": 12,
                "mode": "exclusive",
                "how": "stolen",
                "by": "cli:b",
                "reason": "deploy",
            }
        ]

        line = render_log(entries)

        assert "steal port:8080 cli:b (token 12, exclusive, stolen, by cli:b) — deploy" in line
        assert render_log([]) == "No claim activity."

    def test_a_key_held_already_names_the_token_it_keeps(self) -> None:
        """A set over a key the session held already: that key keeps its own token, so
        the line says which (a script that fences with the set's token alone would be
        refused for it). Before: "(token 13, some already held)"."""
        result = {
            "status": "granted",
            "token": 13,
            "claims": [
                {"resource": "res:a", "mode": "exclusive", "token": 12, "already_held": True},
                {"resource": "res:b", "mode": "exclusive", "token": 13, "already_held": False},
            ],
        }

        line = _claims.granted_line(result)

        assert line == "granted res:a, res:b (token 13, some already held: res:a keeps token 12)"


# --- offline runs -------------------------------------------------------------------------


def _unreachable(offline_env: OfflineEnv) -> dict[str, str]:
    """An environment where no daemon runs and none can be started (state folder a file)."""
    offline_env.state_dir.write_text("not a folder")
    return offline_env.env


class TestOffline:
    def test_claim_needs_a_session(self, meshctl: Meshctl, offline_env: OfflineEnv) -> None:
        """claim acts for a lasting session: refused without one, with the way to get one."""
        run = meshctl("claim", "file:/x", env=offline_env.env)

        assert run.code == 1, run
        assert "MESH_SESSION" in run.err

    def test_run_needs_double_dash(self, meshctl: Meshctl, offline_env: OfflineEnv) -> None:
        run = meshctl("run", "--res", "a", "true", env=offline_env.env)

        assert run.code == 2, run
        assert "put -- before COMMAND" in run.err

    def test_run_unreachable_is_69(self, meshctl: Meshctl, offline_env: OfflineEnv) -> None:
        """Without --fail-open, no daemon means COMMAND does not run (exit 69)."""
        marker = offline_env.root / "ran"
        env = _unreachable(offline_env)

        run = meshctl("run", "--res", "a", "--", "touch", str(marker), env=env)

        assert run.code == 69, run
        assert not marker.exists()

    @pytest.mark.parametrize(
        ("script", "code"), [("exit 0", 0), ("exit 3", 3), ("kill -TERM $$", 128 + 15)]
    )
    def test_fail_open_passes_the_status(
        self, script: str, code: int, meshctl: Meshctl, offline_env: OfflineEnv
    ) -> None:
        """--fail-open runs COMMAND unguarded, says so on stderr, exits with its status."""
        env = _unreachable(offline_env)

        run = meshctl(
            "run", "--res", "a", "--fail-open", "--", "sh", "-c", f"echo out; {script}", env=env
        )

        assert run.code == code, run
        assert run.out == "out\n"
        assert "UNGUARDED" in run.err

    def test_missing_command_is_127(self, meshctl: Meshctl, offline_env: OfflineEnv) -> None:
        env = _unreachable(offline_env)

        run = meshctl("run", "--res", "a", "--fail-open", "--", "/nonexistent/cmd", env=env)

        assert run.code == 127, run
        assert "cannot run '/nonexistent/cmd'" in run.err

    @pytest.mark.parametrize(("name", "status"), [("missing", 127), ("plain-file", 126)])
    @pytest.mark.parametrize("form", [["run", "--res", "res:a"], ["once", "--key", "k"]])
    def test_a_command_that_cannot_run_is_one_json_error(
        self, form: list[str], name: str, status: int, meshctl: Meshctl, daemon: Any
    ) -> None:
        """SPEC §9: with ``--json``, ``run`` and ``once`` print their document when
        COMMAND does not run, and a failure is ``{"error": …}``. A COMMAND that could not
        be started printed nothing on stdout (fails before); the exit status stays the
        shell's (127 not found, 126 not executable)."""
        command = str(daemon.state_dir.parent / name)
        if name == "plain-file":
            Path(command).write_text("not a program\n")
            os.chmod(command, 0o644)
        run = meshctl("--json", *form, "--", command, env=daemon.env)

        assert run.code == status, run
        error = run.json()["error"]
        assert error["data"] == {"code": "EXEC_FAILED", "command": command, "exit": status}
        assert error["message"].startswith(f"cannot run {command!r}: "), error
        assert f"cannot run {command!r}" in run.err, run


class TestSignals:
    @pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
    def test_forwarded_to_command(self, sig: signal.Signals, offline_env: OfflineEnv) -> None:
        """A signal sent to run (by kill, not the tty) reaches COMMAND; run exits with
        COMMAND's status (the trap's 7 here, so the forwarding is what is seen)."""
        env = _unreachable(offline_env)
        ready = offline_env.root / "ready"
        # COMMAND loops while run lives: a failed test that kills run leaves no loop behind
        script = (
            f"trap 'exit 7' {sig.name[3:]}; touch {ready}; "
            "while kill -0 $PPID 2>/dev/null; do sleep 0.05; done"
        )
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "meshctl.cli",
                "run",
                "--res",
                "a",
                "--fail-open",
                "--",
                "sh",
                "-c",
                script,
            ],
            env=env,
            stderr=subprocess.PIPE,
        )
        with reaped(proc):
            deadline = time.monotonic() + 60
            while not ready.exists():
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, "COMMAND never started"
                time.sleep(0.02)

            proc.send_signal(sig)
            _, err = proc.communicate(timeout=60)

        assert proc.returncode == 7, err

    def test_ctrl_c_reaches_command_once(self, offline_env: OfflineEnv) -> None:
        """Ctrl-C on a terminal goes to the whole foreground group: run does not send a
        second SIGINT (COMMAND counts the ones it got and exits 40 + count)."""
        import pty

        env = _unreachable(offline_env)
        child = (
            "import signal, sys, time\n"
            "n = []\n"
            "signal.signal(signal.SIGINT, lambda *a: n.append(1))\n"
            "print('ready', flush=True)\n"
            "while not n: time.sleep(0.01)\n"
            "time.sleep(0.5)\n"  # room for a duplicate to arrive
            "sys.exit(40 + len(n))\n"
        )
        argv = [sys.executable, "-m", "meshctl.cli", "run", "--res", "a", "--fail-open", "--"]
        pid, fd = pty.fork()
        if pid == 0:  # pragma: no cover - the child execs
            os.execve(sys.executable, [*argv, sys.executable, "-c", child], env)
        seen = b""
        deadline = time.monotonic() + 60
        while b"ready" not in seen:
            assert time.monotonic() < deadline, seen
            seen += os.read(fd, 1024)

        os.write(fd, b"\x03")
        with contextlib.suppress(OSError):
            while os.read(fd, 1024):
                pass
        _, status = os.waitpid(pid, 0)
        os.close(fd)

        assert os.waitstatus_to_exitcode(status) == 41


class TestDisabled:
    def test_run_unguarded_and_warns(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        """enabled = false: run runs COMMAND unguarded, warns, and passes its status."""
        mesh_env.write_config("[defaults]\nenabled = false\n")
        ok(meshctl("daemon", "reload", env=daemon.env))

        run = meshctl(
            "run", "--res", "file:/x", "--", "sh", "-c", "echo hi; exit 3", env=daemon.env
        )

        assert run.code == 3, run
        assert run.out == "hi\n"
        assert "disabled" in run.err
        assert "unguarded" in run.err


# --- against the daemon ----------------------------------------------------------------


class TestClaimCommands:
    def test_granted_then_held(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """Granted: exit 0 and the token; another session: exit 75 and who holds it."""
        a = register(meshctl, daemon.env, "refactor auth")
        b = register(meshctl, daemon.env, "other")
        env_a = {**daemon.env, "MESH_SESSION": a}
        env_b = {**daemon.env, "MESH_SESSION": b}

        got = ok(meshctl("claim", "file:/tmp/mc-proj", "--reason", "refactor auth", env=env_a))
        held = meshctl("claim", "file:/tmp/mc-proj/src/a.py", env=env_b)

        assert got.out.startswith("granted file:/tmp/mc-proj (token ")
        assert held.code == 75, held
        assert held.out.startswith(f"held: {a} is editing /tmp/mc-proj")
        assert "— refactor auth" in held.out

    def test_held_line_names_the_holders_branch(
        self, meshctl: Meshctl, daemon: Daemon, short_tmp: Path
    ) -> None:
        """The warning says which branch the holder works on, as SPEC §5's example."""
        (short_tmp / ".git").mkdir()
        (short_tmp / ".git" / "HEAD").write_text("ref: refs/heads/feat/auth\n")
        reg = subprocess.run(
            [
                sys.executable,
                "-m",
                "meshctl.cli",
                "register",
                "--task",
                "refactor auth",
                "--pid",
                str(os.getpid()),
            ],
            env=daemon.env,
            cwd=short_tmp,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        holder = reg.stdout.strip()
        ok(meshctl("claim", str(short_tmp), env={**daemon.env, "MESH_SESSION": holder}))
        other = register(meshctl, daemon.env)

        held = meshctl("claim", f"{short_tmp}/a.py", env={**daemon.env, "MESH_SESSION": other})

        assert held.code == 75, held
        assert held.out.startswith(
            f"held: {holder} is editing {short_tmp} (branch feat/auth) since "
        )
        assert held.out.rstrip().endswith(" — refactor auth")

    def test_json_shape_and_wait_runs_out(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """--json: SPEC §9's shape; a --wait that runs out is held (75) too."""
        a = register(meshctl, daemon.env)
        b = register(meshctl, daemon.env)
        ok(meshctl("claim", "port:18080", env={**daemon.env, "MESH_SESSION": a}))

        run = meshctl(
            "claim", "port:18080", "--wait", "0.2", "--json", env={**daemon.env, "MESH_SESSION": b}
        )

        assert run.code == 75, run
        doc = run.json()
        assert doc["status"] == "held"
        assert doc["holders"][0]["session_id"] == a
        assert {"session_id", "resource", "task", "since", "reason"} <= set(doc["holders"][0])

    @pytest.mark.parametrize(
        "case",
        [
            (("claim", "src/a.py"), "src/a.py", "{here}/src/a.py"),
            (("check", "file:rel"), "file:rel", "file:{here}/rel"),
            (("check", "repo:."), "repo:.", "repo:{here}"),
            (("release", "./a"), "./a", "{here}/a"),
            (("steal", "../up", "--reason", "r"), "../up", "{parent}/up"),
            (
                ("claim", "res:db", "branch:repo:main"),
                "branch:repo:main",
                "branch:{here}/repo:main",
            ),
            (("broadcast", "hi", "--path", "src"), "src", "{here}/src"),
            (("run", "--res", ".", "--", "touch", "ran"), ".", "{here}"),
        ],
    )
    def test_relative_path_refused_with_the_absolute_one_as_hint(
        self, case: tuple[tuple[str, ...], str, str], meshctl: Meshctl, daemon: Daemon,
        short_tmp: Path,
    ) -> None:  # fmt: skip
        """A relative path is sent as typed and refused: BAD_KEY (exit 1) naming the key,
        and the hint says the absolute path it would mean from here (never sent)."""
        args, key, meant = case
        sid = register(meshctl, daemon.env)
        here = short_tmp / "work"
        here.mkdir()

        human, as_json = (
            subprocess.run(
                [sys.executable, "-m", "meshctl.cli", args[0], *extra, *args[1:]],
                env={**daemon.env, "MESH_SESSION": sid},
                cwd=here,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            for extra in ((), ("--json",))
        )

        shown = meant.format(here=os.path.realpath(here), parent=os.path.realpath(short_tmp))
        hint = f'relative path "{key}": give it absolute, e.g. {shown}'
        assert human.returncode == 1, human
        assert human.stdout == ""
        assert human.stderr.startswith(f"meshctl: bad resource key '{key}': ")
        assert human.stderr.splitlines()[-1] == f"  {hint}"
        assert as_json.returncode == 1, as_json
        error = Run([], 1, as_json.stdout, "").json()["error"]  # the one document
        assert error["data"] == {"code": "BAD_KEY", "key": key}  # the key as typed
        assert hint in as_json.stderr
        assert not (here / "ran").exists()
        held = daemon.call("session.list")["result"]["sessions"]
        assert not [c for s in held for c in s.get("claims") or []]

    def test_absolute_path_granted_as_typed(
        self, meshctl: Meshctl, daemon: Daemon, short_tmp: Path
    ) -> None:
        """What to type instead, "$PWD"/src/a.py, is sent as typed: the daemon resolves
        ``..`` and symlinks."""
        sid = register(meshctl, daemon.env)
        (short_tmp / "real").mkdir()
        (short_tmp / "link").symlink_to(short_tmp / "real")

        got = meshctl(
            "claim",
            f"{short_tmp}/link/x/../a.py",
            "--json",
            env={**daemon.env, "MESH_SESSION": sid},
        )

        assert got.code == 0, got
        resource = got.json()["claims"][0]["resource"]
        assert resource == f"file:{os.path.realpath(short_tmp)}/real/a.py"

    def test_check_release_steal_log(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """check: 75 on a claim, 0 once released; steal takes it; log shows it all."""
        a = register(meshctl, daemon.env)
        b = register(meshctl, daemon.env)
        env_a = {**daemon.env, "MESH_SESSION": a}
        env_b = {**daemon.env, "MESH_SESSION": b}
        ok(meshctl("claim", "res:db", env=env_a))

        busy = meshctl("check", "res:db", env=env_b)
        stolen = ok(meshctl("steal", "res:db", "--reason", "migration", env=env_b))
        released = ok(meshctl("release", env=env_b))
        free = ok(meshctl("check", "res:db", env=env_a))
        log = ok(meshctl("log", "--since", "1h", env=daemon.env))

        assert busy.code == 75, busy
        assert busy.out.startswith(f"held: {a} holds res:db")
        assert stolen.out.startswith(f"stole res:db from {a} (token ")
        assert "res:db" in released.out
        assert free.out.startswith("free:")
        assert "steal res:db" in log.out

    def test_a_broad_claim_can_be_stolen_and_run_under_broad(
        self, meshctl: Meshctl, daemon: Daemon
    ) -> None:
        """SPEC §5: `file:/` and the home folder are refused "unless --broad is given";
        the refusal says "pass --broad". `steal` and `run --res` take it too, as `claim`
        and `preempt` do. (Before: "No such option '--broad'", exit 2, so a claim on
        `file:/` could not be stolen from the command line.)"""
        a = register(meshctl, daemon.env)
        b = register(meshctl, daemon.env)
        env_a = {**daemon.env, "MESH_SESSION": a}
        env_b = {**daemon.env, "MESH_SESSION": b}
        ok(meshctl("claim", "file:/", "--broad", env=env_a))

        refused = meshctl("steal", "file:/", "--reason", "stuck", env=env_b)
        stolen = meshctl("steal", "file:/", "--broad", "--reason", "stuck", env=env_b)
        ok(meshctl("release", env=env_b))
        ran = _run(meshctl, daemon.env, "--res", "file:/", "--broad", "--", "true")
        unbroad = _run(meshctl, daemon.env, "--res", "file:/", "--", "true")

        assert refused.code == 1, refused
        assert "pass --broad" in refused.err
        assert stolen.code == 0, stolen
        assert stolen.out.startswith(f"stole file:/ from {a} (token ")
        assert ran.code == 0, ran
        assert unbroad.code == 1, unbroad
        assert "pass --broad" in unbroad.err

    def test_validate_is_the_fencing_check_on_the_command_line(
        self, meshctl: Meshctl, daemon: Daemon
    ) -> None:
        """SPEC §1: the CLI has every operation; §5's ``claim.validate(resource, token)``
        is ``meshctl validate RES TOKEN``: exit 0 while the token is the holder's, 75
        once it is not (an outcome, as ``held`` is); the key is canonicalised as a
        claim's is. (Before: "No such command 'validate'", exit 2.)"""
        a = register(meshctl, daemon.env)
        b = register(meshctl, daemon.env)
        got = ok(meshctl("claim", "res:fence", "--json", env={**daemon.env, "MESH_SESSION": a}))
        token = str(got.json()["token"])

        valid = meshctl("validate", "res:fence", token, env=daemon.env)
        as_json = meshctl("validate", "RES:fence", token, "--json", env=daemon.env)
        ok(meshctl("steal", "res:fence", "--reason", "r", env={**daemon.env, "MESH_SESSION": b}))
        stale = meshctl("validate", "res:fence", token, env=daemon.env)
        bad = meshctl("validate", "nosuch:x", token, env=daemon.env)
        word = meshctl("validate", "res:fence", "twelve", env=daemon.env)

        assert valid.code == 0, valid
        assert valid.out.startswith(f"valid: token {token} holds res:fence ({a})")
        assert as_json.code == 0, as_json
        assert as_json.json()["valid"] is True
        assert as_json.json()["session_id"] == a
        assert stale.code == 75, stale
        assert stale.out.startswith(f"not valid: token {token} no longer holds res:fence")
        assert bad.code == 1, bad
        assert "BAD" in bad.err or "bad resource key" in bad.err
        assert word.code == 2, word
        assert "'twelve' is not a valid whole number" in word.err


def _run(meshctl: Meshctl, env: dict[str, str], *args: str) -> Run:
    return meshctl("run", *args, env=env)


class TestRun:
    @pytest.mark.parametrize(
        ("script", "code"), [("exit 0", 0), ("exit 3", 3), ("kill -TERM $$", 128 + 15)]
    )
    def test_exit_status(self, script: str, code: int, meshctl: Meshctl, daemon: Daemon) -> None:
        """run exits with COMMAND's status and releases what it took."""
        run = _run(meshctl, daemon.env, "--res", "res:job", "--", "sh", "-c", script)
        after = daemon.call("session.list")["result"]["sessions"]

        assert run.code == code, run
        assert not [s for s in after if s["source"] == "run"]

    def test_held_is_75_or_held_exit(self, meshctl: Meshctl, daemon: Daemon) -> None:
        holder = register(meshctl, daemon.env)
        ok(meshctl("claim", "res:job", env={**daemon.env, "MESH_SESSION": holder}))

        held = _run(meshctl, daemon.env, "--res", "res:job", "--", "touch", "/tmp/never")
        custom = _run(meshctl, daemon.env, "--res", "res:job", "--held-exit", "9", "--", "true")

        assert held.code == 75, held
        assert held.err.startswith(f"held: {holder}")
        assert custom.code == 9, custom

    def test_never_releases_the_parents_claims(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """run under MESH_SESSION is its child: it gets the parent's key, and leaves the
        parent's claim in place when it ends."""
        parent = register(meshctl, daemon.env)
        env = {**daemon.env, "MESH_SESSION": parent}
        ok(meshctl("claim", "res:shared-job", env=env))

        ok(_run(meshctl, env, "--res", "res:shared-job", "--", "true"))
        other = register(meshctl, daemon.env)
        still = meshctl("check", "res:shared-job", env={**daemon.env, "MESH_SESSION": other})

        assert still.code == 75, still
        assert parent in still.out


class TestRunSurvivesSigkill:
    def test_claim_held_until_command_exits(
        self, meshctl: Meshctl, daemon: Daemon, short_tmp: Path
    ) -> None:
        """SIGKILL of run while COMMAND runs: the claim stays until COMMAND exits."""
        go, started = short_tmp / "go", short_tmp / "started"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "meshctl.cli",
                "run",
                "--res",
                "res:long",
                "--",
                "sh",
                "-c",
                f"touch {started}; while [ ! -e {go} ]; do sleep 0.05; done",
            ],
            env=daemon.env,
        )
        try:
            with reaped(proc):
                probe = register(meshctl, daemon.env)
                env = {**daemon.env, "MESH_SESSION": probe}
                deadline = time.monotonic() + 60
                while meshctl("check", "res:long", env=env).code != 75:
                    assert time.monotonic() < deadline, "run never took res:long"
                    time.sleep(0.05)
                # COMMAND starts only once run has made its pid an anchor of the session:
                # a kill before that (res:long already held) rightly frees the claim, since
                # COMMAND then never runs (seen once on a loaded machine)
                while not started.exists():
                    assert time.monotonic() < deadline, "COMMAND never started"
                    time.sleep(0.05)

                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=60)
            # The daemon notices a dead process within 2 s (SPEC §4): for twice that, the
            # claim must stay held, since COMMAND still runs.
            held = []
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                held.append(meshctl("check", "res:long", env=env).code)
        finally:  # COMMAND ends on every path (left looping, it would outlive the test)
            go.touch()
        deadline = time.monotonic() + 60
        while meshctl("check", "res:long", env=env).code != 0:
            assert time.monotonic() < deadline, "res:long never freed after COMMAND exited"
            time.sleep(0.1)

        assert set(held) == {75}


other_daemons = _other_daemons  # the fixture of test_with_daemon, shared


class TestCheckAllProfiles:
    @pytest.mark.usefixtures("other_daemons")
    def test_visible_profiles_are_a_notice(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """--all-profiles shows claims in profiles that let us see them (not in hidden
        ones), as a notice: only our own profile's claims make check exit 75."""
        for profile in ("other", "hidden"):
            sock = daemon.socket.parent / f"{profile}.sock"
            where = ["--profile", profile, "--socket", str(sock)]
            sid = ok(
                meshctl(
                    "register",
                    "--task",
                    f"in {profile}",
                    "--pid",
                    str(os.getpid()),
                    *where,
                    env=daemon.env,
                )
            ).out.strip()
            ok(meshctl("claim", "res:shared-db", "--session", sid, *where, env=daemon.env))

        human = meshctl("check", "res:shared-db", "--all-profiles", env=daemon.env)
        doc = meshctl("check", "res:shared-db", "--all-profiles", "--json", env=daemon.env)
        plain = meshctl("check", "res:shared-db", env=daemon.env)

        assert human.code == 0, human
        assert "notice: in profile other, " in human.out
        assert "hidden" not in human.out
        assert "skipped profile gone" in human.err
        assert [c["profile"] for c in doc.json()["elsewhere"]] == ["other"]
        assert plain.out.startswith("free:")
