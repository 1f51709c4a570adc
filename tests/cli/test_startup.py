"""What a ``meshctl`` run imports: the start-up path stays lean (BENCH.md).

BENCH.md holds a one-round-trip command within 1.8x of a stdlib one-request script.
These tests do not time anything (timings live in ``bench/``, section ``startup``);
they check the cause instead: which modules a real run loaded, read from
``sys.modules`` at exit in a subprocess.

The hot commands (``check``, ``claim``, ``release``, ``heartbeat``, ``sessions
active``, ``register``, ``end``) take the click-free fast path
(:mod:`meshctl.cli._fast`): they load neither click (``import click`` alone costs
about 1.7x that script), ``typing``, ``threading`` or ``contextlib``, nor the client
library's sessions and messaging (``meshctl._sync.session``):
:data:`HOT_NEVER`. Every command also stays off the modules below, each of which
costs milliseconds and is needed only off the common path:

- ``subprocess``, ``shutil``: starting a daemon (``meshctl._spawn``);
- ``tempfile``: the fallback runtime folder when there is no usable one;
- ``logging``: the client library's warnings (``meshctl._log``). click does not
  import it (checked here too: a bare ``import click`` run is part of the test);
- ``pathlib``: only ``--all-profiles`` and tests want ``Path`` objects;
- ``dataclasses``: nothing on the CLI path needs it.

A run's exit status is checked, so a run that stopped early (and so imported
little) cannot pass for a light one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import pytest

from .conftest import OfflineEnv

#: Off the start-up path of every command that finds its daemon running.
LAZY = ("subprocess", "shutil", "tempfile", "logging", "pathlib", "dataclasses")
#: Never on the CLI path at all (BENCH.md).
HEAVY = ("anyio", "msgspec", "platformdirs")
#: Never on the path of a hot command (the fast path): click, typing, the sessions and
#: messaging half of the client library, the click command modules.
HOT_NEVER = (
    "click",
    "typing",  # about 9 ms of CPU here, half of S: modules on the path guard their imports
    "contextlib",
    "meshctl._sync.session",
    "meshctl._core.messaging",
    "meshctl.cli._root",
    "meshctl.cli.claims",
    "meshctl.cli.sessions",
    "meshctl.cli.lifecycle",
    "threading",  # Mesh's lock is _thread's: threading costs about a millisecond
    "struct",  # the peer's credentials are three ints (int.from_bytes)
    "fcntl",  # the spawn lock's, only when a daemon has to be started
    "socket",  # _socket does it: socket adds its enums and selectors (+ enum, functools)
    "selectors",
)
#: Nor, unless the output is JSON (``--json`` imports json, and json these): what S (the
#: stdlib one-request script) pays for json and socket is a third of its start-up.
HOT_NEVER_HUMAN = ("json", "re", "enum", "functools", "collections", "math")

# Runs ``meshctl`` as the console script does, and writes sys.modules at exit
# (after click's SystemExit) to the file named by argv[1].
_PROBE = """
import atexit, sys
out = sys.argv.pop(1)
def dump():
    with open(out, "w") as f:
        f.write("\\n".join(sorted(sys.modules)))
atexit.register(dump)
sys.argv[0] = "meshctl"
from meshctl.cli import main
main()
"""


# Runs ``meshctl`` as above, and writes every regular expression that a module of ours
# (meshctl, meshd) compiled, one JSON string a line, to the file named by argv[1].
_PATTERNS = """
import atexit, json, re, sys
out = sys.argv.pop(1)
seen = []
compile_ = re._compile
def spy(pattern, flags):
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") in ("re", "re._compiler"):
        frame = frame.f_back
    caller = frame.f_globals.get("__name__", "") if frame is not None else ""
    if caller.split(".")[0] in ("meshctl", "meshd"):
        seen.append(f"{caller}: {pattern}")
    return compile_(pattern, flags)
re._compile = spy
def dump():
    with open(out, "w") as f:
        f.write("\\n".join(json.dumps(p) for p in seen))
atexit.register(dump)
sys.argv[0] = "meshctl"
from meshctl.cli import main
main()
"""


def _probed(probe: str, args: list[str], env: dict[str, str], code: int) -> str:
    """Run ``meshctl ARGS`` under ``probe`` (a ``python -c`` script that writes what it saw
    to the file named by its first argument), check the exit code, return that file."""
    fd, path = tempfile.mkstemp(prefix="probe-")
    os.close(fd)
    try:
        done = subprocess.run(
            [sys.executable, "-c", probe, path, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == code, f"{args} -> {done.returncode}\n{done.stderr[-2000:]}"
        with open(path, encoding="utf-8") as f:
            return f.read()
    finally:
        os.unlink(path)


def compiled(args: list[str], env: dict[str, str], code: int) -> list[str]:
    """The patterns our modules compiled in a ``meshctl ARGS`` run (``module: pattern``)."""
    return [json.loads(line) for line in _probed(_PATTERNS, args, env, code).splitlines()]


def loaded(args: list[str], env: dict[str, str], code: int) -> set[str]:
    """Every module a ``meshctl ARGS`` run had imported when it exited with ``code``."""
    names = set(_probed(_PROBE, args, env, code).split())
    assert "meshctl.cli" in names, sorted(names)
    return names


def imported_by(code: str) -> set[str]:
    """The modules ``python -c CODE`` has loaded at its end."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys; print(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(done.stdout.split())


def _register(daemon: Any) -> str:
    """A session that lives as long as this test process."""
    reply = daemon.call("session.register", {"task": "t", "pid": os.getpid()})
    return str(reply["result"]["session_id"])


def _top(names: set[str], wanted: tuple[str, ...]) -> list[str]:
    return sorted(set(wanted) & names)


class TestImportOnly:
    def test_click_itself_imports_none_of_them(self) -> None:
        """The premise: click alone loads none of LAZY (else it would be the floor's cost)."""
        names = imported_by("import click")

        assert "click" in names
        assert _top(names, LAZY) == []

    @pytest.mark.parametrize("code", ["import meshctl.cli", "from meshctl.cli import cli"])
    def test_cli_import_is_lean(self, code: str) -> None:
        """The CLI package imports nothing until asked (the click tree: click, no more)."""
        names = imported_by(code)

        assert _top(names, LAZY + HEAVY) == []
        assert ("click" in names) is code.startswith("from")
        assert "meshctl._sync.session" not in names

    def test_client_import_is_lean(self) -> None:
        """``import meshctl`` loads nothing; its ``Mesh`` loads none of LAZY or HEAVY."""
        assert "meshctl._sync" not in imported_by("import meshctl")
        names = imported_by("import meshctl; meshctl.Mesh")

        assert "meshctl._sync" in names
        assert _top(names, LAZY + HEAVY) == []


class TestOfflineRuns:
    def test_help(self, offline_env: OfflineEnv) -> None:
        """--help loads none of LAZY but shutil, which click's HelpFormatter imports itself
        (for the terminal width) when it formats help: click's cost, not ours."""
        names = loaded(["--help"], offline_env.env, 0)

        assert "click" in names
        assert _top(names, LAZY + HEAVY) == ["shutil"]

    def test_refusal(self, offline_env: OfflineEnv) -> None:
        """A refusal (no session) of a hot command: the fast path, lean."""
        names = loaded(["heartbeat", "--json"], offline_env.env, 1)

        assert _top(names, LAZY + HEAVY + HOT_NEVER) == []


class TestRoundTrips:
    @pytest.mark.parametrize(
        "args",
        [
            ["sessions", "active"],
            ["sessions", "active", "--json"],
            ["check", "res:x", "/tmp/src/a.py"],
            ["--json", "release"],
            ["register", "--task", "t", "--liveness", "heartbeat"],
            ["end"],
        ],
    )
    def test_hot(self, args: list[str], daemon: Any) -> None:
        """A hot command that finds its daemon running: no click, none of LAZY or HEAVY;
        without --json, not even json, re or enum."""
        env = {**daemon.env, "MESH_SESSION": _register(daemon)}
        names = loaded(args, env, 0)

        assert "meshctl._sync" in names
        assert _top(names, LAZY + HEAVY + HOT_NEVER) == []
        assert _top(names, HOT_NEVER_HUMAN) == [] or "--json" in args

    @pytest.mark.parametrize(
        "args", [["call", "mesh.ping"], ["board", "show", "--json"], ["daemon", "status", "--json"]]
    )
    def test_lean(self, args: list[str], daemon: Any) -> None:
        """Any other command that finds its daemon running loads none of LAZY or HEAVY."""
        names = loaded(args, daemon.env, 0)

        assert "click" in names
        assert "meshctl._sync" in names
        assert _top(names, LAZY + HEAVY) == []

    def test_heartbeat_of_a_session(self, daemon: Any) -> None:
        """The per-turn command, heartbeat, on a registered session: lean too."""
        reg = subprocess.run(
            [
                sys.executable,
                "-m",
                "meshctl.cli",
                "register",
                "--task",
                "t",
                "--pid",
                str(os.getpid()),
            ],
            env=daemon.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        env = {**daemon.env, "MESH_SESSION": reg.stdout.strip()}

        names = loaded(["heartbeat", "--status", "thinking"], env, 0)

        assert _top(names, LAZY + HEAVY + HOT_NEVER + HOT_NEVER_HUMAN) == []

    def test_claim_and_release(self, daemon: Any) -> None:
        """claim, then release: both hot, both lean."""
        env = {**daemon.env, "MESH_SESSION": _register(daemon)}
        for args in (["claim", "res:lean", "--reason", "r"], ["release", "res:lean"]):
            names = loaded(args, env, 0)

            assert _top(names, LAZY + HEAVY + HOT_NEVER + HOT_NEVER_HUMAN) == []

    def test_a_long_listing_does_not_buy_msgspec(self, daemon: Any) -> None:
        """A listing past BIG_LINE (10 sessions) is a long reply, which a process that
        keeps reading them decodes with msgspec once bought; a one-shot command reads
        one and never buys it (importing it costs more than S)."""
        from meshctl import _conn

        for _ in range(10):
            _register(daemon)
        listing = daemon.call("session.list", {})

        assert len(json.dumps(listing)) > _conn.BIG_LINE
        for args in (["sessions", "active"], ["sessions", "active", "--json"]):
            names = loaded(args, {**daemon.env, "MESH_SESSION": _register(daemon)}, 0)

            assert _top(names, LAZY + HEAVY + HOT_NEVER) == []

    def test_autostart_does_load_subprocess(self, offline_env: OfflineEnv) -> None:
        """The other side: starting a daemon is where subprocess is paid for (so the
        probe can see a lazy import happen, and the lean results above mean something)."""
        try:
            names = loaded(["call", "mesh.ping"], offline_env.env, 0)
        finally:
            subprocess.run(
                [sys.executable, "-m", "meshctl.cli", "daemon", "stop"],
                env=offline_env.env,
                capture_output=True,
                timeout=60,
                check=False,
            )

        assert "subprocess" in names


class TestPatterns:
    """A hot command compiles no regular expression of its own: each cost 0.1-1.3 ms of
    a budget of a few ms (the escaping of text for people was two patterns, 2-3 ms
    together; the profile rule is checked without one)."""

    @pytest.mark.parametrize(
        "args",
        [
            ["check", "res:x", "/tmp/src/a.py"],
            ["sessions", "active"],
            ["claim", "res:p", "--reason", "r"],
            ["release", "res:p"],
            ["heartbeat", "--status", "thinking"],
        ],
    )
    def test_hot(self, args: list[str], daemon: Any) -> None:
        env = {**daemon.env, "MESH_SESSION": _register(daemon), "MESH_PROFILE": "test"}

        assert compiled(args, env, 0) == []

    def test_the_probe_sees_a_compile(self, daemon: Any) -> None:
        """The other side: text that needs escaping for people does compile the escaping
        pattern (on the run that needs it), so an empty list above means something."""
        env = {**daemon.env, "MESH_SESSION": _register(daemon)}
        daemon.call("session.register", {"task": "bell \x07 here", "pid": os.getpid()})

        seen = compiled(["sessions", "active"], env, 0)

        assert any(p.startswith("meshctl.cli._output: [") for p in seen), seen
