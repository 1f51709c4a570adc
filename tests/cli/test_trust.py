"""The CLI's trust items and its terminal hygiene, through the real daemon.

Each test names the defect it guards; each ran against the code before its fix
and failed there.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import DaemonHandle
from tests.support import as_at_a_terminal, wait_for

from meshctl.cli import _output, cli

from .conftest import Meshctl, OfflineEnv, Run

Daemon = Any


def ok(run: Run) -> Run:
    assert run.code == 0, run
    return run


def register(meshctl: Meshctl, env: dict[str, str], task: str = "t") -> str:
    """A process session tied to this test process; its id."""
    return ok(meshctl("register", "--task", task, "--pid", str(os.getpid()), env=env)).out.strip()


class TestRunIdentity:
    def test_command_gets_runs_own_session(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """COMMAND sees run's session in MESH_SESSION, a child of the parent's."""
        parent = register(meshctl, daemon.env)
        env = {**daemon.env, "MESH_SESSION": parent}
        script = 'echo "$MESH_SESSION"; "$0" -m meshctl.cli sessions show "$MESH_SESSION" --json'

        run = ok(
            meshctl("run", "--res", "res:job", "--", "sh", "-c", script, sys.executable, env=env)
        )

        inner, _, shown = run.out.partition("\n")
        assert inner
        assert inner != parent
        assert f'"parent": "{parent}"' in shown
        assert '"source": "run"' in shown


class TestBadBytesAndNumbers:
    """Undecodable argv bytes and non-finite numbers are refused, never a crash."""

    @pytest.mark.parametrize(
        "args",
        [
            ["claim", "res:x", "--wait", "nan"],
            ["claim", "res:x", "--wait", "inf"],
            ["claim", "res:x", "--wait", "1e400"],
            ["claim", "res:x", "--ttl", "-1"],
            ["claim", "res:x", "--ttl", "nan"],
            ["run", "--res", "res:x", "--wait", "-inf", "--", "true"],
            ["sessions", "ask", "cli:x", "hi", "--timeout", "nan"],
            ["register", "--task", "t", "--expire-after", "inf"],
            ["job", "wait", "backup", "--timeout", "nan"],
            # signal wait --timeout inf waited for ever, nan was refused as wire JSON
            ["signal", "wait", "sig-x", "--timeout", "inf"],
            ["signal", "wait", "sig-x", "--timeout", "1e400"],
            ["signal", "wait", "sig-x", "--timeout", "nan"],
            ["signal", "wait", "sig-x", "--timeout", "31536001"],
            ["once", "--key", "k", "--ttl", "inf", "--", "true"],
            ["once", "--key", "k", "--ttl", "nan", "--", "true"],
            ["once", "--key", "k", "--ttl", "31536001", "--", "true"],
        ],
    )
    def test_non_finite_numbers_are_usage_errors(
        self, args: list[str], meshctl: Meshctl, offline_env: OfflineEnv
    ) -> None:
        """nan, inf, -1 and overflowing numbers exit 2 naming the option (no daemon needed)."""
        env = {**offline_env.env, "MESH_SESSION": "cli:me"}

        run = meshctl("--json", *args, env=env)

        assert run.code == 2, run
        assert "Traceback" not in run.err
        assert run.json()["error"]["data"]["code"] == "USAGE"
        assert "Invalid value for '--" in run.err

    @pytest.mark.parametrize(
        ("args", "option"),
        [
            (["prioritize", "cli:x", "--rank", "high"], "--rank"),
            (["register", "--task", "t", "--pid", "self"], "--pid"),
            (["handoff", "show", "latest"], "HID"),
            (["signal", "wait", "sig-x", "--after", "last"], "--after"),
            (["once", "--key", "k", "--held-exit", "x", "--", "true"], "--held-exit"),
        ],
    )
    def test_a_word_for_a_number_says_a_whole_number(
        self, args: list[str], option: str, meshctl: Meshctl, offline_env: OfflineEnv
    ) -> None:
        """An id, a rank, a pid or an exit status is one whole number; a word there was
        refused as "'high' is not a valid integer range" (fails before)."""
        run = meshctl(*args, env={**offline_env.env, "MESH_SESSION": "cli:me"})

        assert run.code == 2, run
        assert f"Invalid value for '{option}': " in run.err, run
        assert "is not a valid whole number" in run.err, run
        assert "integer range" not in run.err, run

    @pytest.mark.parametrize(
        ("args", "shown"),
        [
            (["call", "mesh.ping", '{"x": NaN}'], "NaN"),
            (["call", "mesh.ping", '{"x": [1, Infinity]}'], "Infinity"),
            (["signal", "emit", "sig-x", '{"rows": -Infinity}'], "-Infinity"),
            (["signal", "emit", "sig-x", "--payload", "NaN"], "NaN"),
        ],
    )
    def test_non_finite_json_is_a_usage_error(
        self, args: list[str], shown: str, meshctl: Meshctl, offline_env: OfflineEnv
    ) -> None:
        """NaN and ±Infinity typed as JSON went to the daemon (Python's json reads them),
        which answered an error of no id (exit 1, "meshd could not read a request …"). They
        are not JSON: a usage error in one sentence, before any daemon is asked (fails
        before)."""
        run = meshctl("--json", *args, env=offline_env.env)

        assert run.code == 2, run
        assert "Traceback" not in run.err
        assert run.json()["error"]["data"]["code"] == "USAGE"
        said = run.err.strip().splitlines()[-1]
        assert f"is not JSON: {shown} is not a JSON number (JSON numbers are finite)" in said or (
            f"is not valid JSON: {shown} is not a JSON number (JSON numbers are finite)" in said
        ), run.err

    def test_undecodable_key_is_bad_key(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """A path that is not UTF-8 (bytes on POSIX) is BAD_KEY with the byte shown, not a crash."""
        env = {**daemon.env, "MESH_SESSION": register(meshctl, daemon.env)}
        path = os.fsdecode(b"src/caf\xe9.py")

        run = meshctl("claim", path, "--json", env=env)

        assert run.code == 1, run
        assert "Traceback" not in run.err
        assert run.json()["error"]["data"]["code"] == "BAD_KEY"
        assert "caf\\xe9.py" in run.err

    def test_undecodable_text_names_its_argument(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """Undecodable bytes in a message or a reason are a usage error naming the argument."""
        env = {**daemon.env, "MESH_SESSION": register(meshctl, daemon.env)}
        other = register(meshctl, daemon.env)

        text = meshctl("send", other, os.fsdecode(b"caf\xe9"), env=env)
        reason = meshctl("claim", "res:x", "--reason", os.fsdecode(b"\xff"), env=env)

        assert (text.code, reason.code) == (2, 2), (text, reason)
        assert text.err.startswith("meshctl: TEXT…: 'caf\\xe9' is not valid UTF-8")
        assert reason.err.startswith("meshctl: --reason: '\\xff' is not valid UTF-8")

    def test_run_passes_undecodable_command_faithfully(
        self, meshctl: Meshctl, daemon: Daemon, short_tmp: Path
    ) -> None:
        """run's COMMAND gets its bytes as they were; only its task line shows them escaped."""
        target = os.fsdecode(bytes(short_tmp) + b"/caf\xe9")

        run = meshctl("run", "--res", "res:x", "--", "touch", target, env=daemon.env)

        assert run.code == 0, run
        assert os.path.exists(os.fsencode(target))


class TestValidationNamesTheArgument:
    """A daemon INVALID_PARAMS about a typed argument is exit 2 naming it."""

    def test_empty_message(self, meshctl: Meshctl, daemon: Daemon) -> None:
        env = {**daemon.env, "MESH_SESSION": register(meshctl, daemon.env)}
        other = register(meshctl, daemon.env)

        run = meshctl("send", other, "", env=env)
        doc = meshctl("send", other, "", "--json", env=env)

        assert run.code == 2, run
        assert run.err.startswith("meshctl: TEXT…: must not be empty")
        assert "Expected `str`" not in run.err
        assert doc.json()["error"]["data"]["argument"] == "TEXT…"

    def test_bad_session_id(self, meshctl: Meshctl, daemon: Daemon) -> None:
        run = meshctl("heartbeat", env={**daemon.env, "MESH_SESSION": "two words"})

        assert run.code == 2, run
        assert run.err.startswith("meshctl: --session (MESH_SESSION): ")

    def test_library_names_never_leak(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """A too-broad key says --broad (not broad=True); no daemon says meshctl's words."""
        env = {**daemon.env, "MESH_SESSION": register(meshctl, daemon.env)}

        broad = meshctl("claim", "file:/", env=env)
        daemon.stop()
        status = meshctl("daemon", "status", env=env)

        assert broad.code == 1, broad
        assert "pass --broad" in broad.err
        assert "broad=True" not in broad.err
        assert status.code == 69, status
        assert "autostart" not in status.err


# --- fuzzing argv ----------------------------------------------------------------------

#: Commands safe to fuzz in-process: none runs a program, stops the daemon, waits on
#: other sessions or follows forever.
FUZZ_COMMANDS = [
    ["claim"],
    ["release"],
    ["check"],
    ["steal"],
    ["log"],
    ["send"],
    ["inbox"],
    ["reply"],
    ["register"],
    ["heartbeat"],
    ["sessions", "active"],
    ["sessions", "show"],
    ["sessions", "ask"],
    ["handoff", "write"],
    ["handoff", "list"],
    ["handoff", "show"],
    ["sync"],
    ["board", "show"],
    ["notes", "add"],
    ["notes", "list"],
    ["jobs"],
    ["prioritize"],
    ["nosuchcommand"],
]
FUZZ_TOKENS = [
    "--json", "--wait", "--ttl", "--timeout", "--reason", "--task", "--shared", "--all",
    "--peek", "--since", "--to", "--files", "--next", "--liveness", "--pid", "--id",
    "--expire-after", "--status", "--broad", "--fresh", "--all-profiles", "--session",
    "nan", "inf", "-inf", "-1", "0", "1e400", "0.01", "", " ", "res:x", "port:99999",
    "file:/", "~", "/tmp", "src/a.py", "x" * 5000, "café", "\u202etxt.exe", "a\nb",
    "\x1b]0;pwned\x07", "\x1b[2J", "\x00", "{}", "[1]", "12", "-5", "99999999999999999999",
    os.fsdecode(b"caf\xe9"), os.fsdecode(b"\xff\xfe"), "--", "-x", "--no-such-option",
]  # fmt: skip
NEVER = {"--socket", "--profile", "--follow", "--collect", "-h", "--help", "-V", "--version"}
_token = st.one_of(
    st.sampled_from(FUZZ_TOKENS),
    st.text(max_size=12).filter(lambda t: t not in NEVER),
)


#: Options of the fuzzed commands that take a value (``--reason --json``: a reason).
VALUE_OPTIONS = {
    "--wait", "--ttl", "--timeout", "--reason", "--task", "--since", "--to", "--files",
    "--next", "--liveness", "--pid", "--id", "--expire-after", "--status", "--limit",
    "--rank", "--source", "--parent", "--slot", "--branch", "--path", "--summary", "--session",
}  # fmt: skip


def _json_flag(args: list[str]) -> bool:
    """Whether ``--json`` stands as a flag (not as an option's value, nor after ``--``)."""
    taking_value = False
    for arg in args:
        if taking_value:
            taking_value = False
        elif arg == "--":
            return False
        elif arg == "--json":
            return True
        else:
            taking_value = arg in VALUE_OPTIONS
    return False


@pytest.fixture(scope="module")
def fuzz_daemon() -> Iterator[tuple[dict[str, str], str]]:
    """One real daemon for every example, and a session to act for."""
    root = Path(tempfile.mkdtemp(prefix="mf-", dir="/tmp"))
    runtime = root / "run"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
    env.update(
        MESH_SOCKET=str(runtime / "meshd" / "test.sock"),
        MESH_STATE_DIR=str(root / "state"),
        MESH_CONFIG=str(root / "config.toml"),
        XDG_RUNTIME_DIR=str(runtime),
        MESH_PROFILE="test",
    )
    d = DaemonHandle(env=env, socket=runtime / "meshd" / "test.sock", state_dir=root / "state")
    d.start()
    try:
        reg = d.call("session.register", {"task": "fuzz", "liveness": "heartbeat"})
        yield env, reg["result"]["session_id"]
    finally:
        d.stop()
        shutil.rmtree(root, ignore_errors=True)


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(command=st.sampled_from(FUZZ_COMMANDS), tokens=st.lists(_token, max_size=6))
def test_fuzz_argv(
    fuzz_daemon: tuple[dict[str, str], str], command: list[str], tokens: list[str]
) -> None:
    """Any argv gives no traceback, a SPEC exit code, and with --json one document."""
    env, sid = fuzz_daemon
    args = [*command, *tokens]
    runner = CliRunner()

    result = runner.invoke(cli, args, env={**env, "MESH_SESSION": sid})

    shown = f"{args!r} -> {result.exit_code}\n{result.stdout}\n{result.stderr}"
    assert result.exit_code in {0, 1, 2, 69, 75}, shown
    assert isinstance(result.exception, SystemExit | None), shown
    assert "Traceback" not in result.stderr, shown
    assert "internal error" not in result.stderr, shown
    if _json_flag(args):
        json.loads(result.stdout)  # exactly one document: raises on none or two


# --- consuming while printing ----------------------------------------------------------


def _meshctl_popen(*args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "meshctl.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,  # read(1) takes one byte off the pipe, no more
    )


def _finish(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    """Close our end of stdout, wait; the exit code and stderr."""
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.close()
    code = proc.wait(timeout=30)
    with proc.stderr:
        return code, proc.stderr.read().decode()


def _read_until(stream: Any, marker: bytes) -> bytes:
    """Read one byte at a time until ``marker`` has been read (so nothing more is taken)."""
    seen = b""
    while not seen.endswith(marker):
        byte = stream.read(1)
        assert byte, f"stdout ended before {marker!r}: {seen!r}"
        seen += byte
    return seen


class TestInboxMarksReadOnlyWhatWasRead:
    """SPEC §6: a reader that leaves early leaves the rest unread, exit never 0."""

    @pytest.fixture
    def inbox_of_12(self, meshctl: Meshctl, daemon: Daemon) -> tuple[dict[str, str], list[int]]:
        sender = register(meshctl, daemon.env)
        reader = register(meshctl, daemon.env)
        ids = []
        for n in range(12):
            sent = daemon.call(
                "message.send", {"session_id": sender, "to": reader, "text": f"item {n}"}
            )
            ids.append(sent["result"]["id"])
        return {**daemon.env, "MESH_SESSION": reader}, ids

    def _unread(self, meshctl: Meshctl, env: dict[str, str]) -> list[int]:
        return [i["id"] for i in ok(meshctl("inbox", "--peek", "--json", env=env)).json()]

    def test_head_c_50(
        self, meshctl: Meshctl, inbox_of_12: tuple[dict[str, str], list[int]]
    ) -> None:
        """`meshctl inbox | head -c 50`: at most the item head read is marked; exit 1."""
        env, _ids = inbox_of_12
        cmd = f'"{sys.executable}" -m meshctl.cli inbox | head -c 50; exit "${{PIPESTATUS[0]}}"'

        done = subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, check=False)

        assert done.returncode == 1, done
        assert b"stay unread" in done.stderr
        assert len(self._unread(meshctl, env)) >= 11

    def test_peek_says_nothing_was_marked_read(
        self, meshctl: Meshctl, inbox_of_12: tuple[dict[str, str], list[int]]
    ) -> None:
        """`meshctl inbox --peek | head -c 50` marks nothing read, and the note said
        "it took 1 of 12 item(s) (marked read)" (fails before)."""
        env, ids = inbox_of_12
        cmd = f'"{sys.executable}" -m meshctl.cli inbox --peek | head -c 50; exit "${{PIPESTATUS[0]}}"'

        done = subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, check=False)

        assert done.returncode == 1, done
        assert b"marked read)" not in done.stderr, done.stderr
        assert b"--peek: none was marked read" in done.stderr, done.stderr
        assert self._unread(meshctl, env) == ids

    def test_reader_leaves_inside_the_second_item(
        self, meshctl: Meshctl, inbox_of_12: tuple[dict[str, str], list[int]]
    ) -> None:
        """The first item read whole is marked read; the one cut off and the rest are not."""
        env, ids = inbox_of_12
        proc = _meshctl_popen("inbox", env=env)
        assert proc.stdout is not None

        _read_until(proc.stdout, f"#{ids[1]} [from".encode())
        code, err = _finish(proc)

        assert code == 1, err
        assert self._unread(meshctl, env) == ids[1:]

    def test_json_is_taken_whole_or_not_at_all(
        self, meshctl: Meshctl, inbox_of_12: tuple[dict[str, str], list[int]]
    ) -> None:
        env, ids = inbox_of_12
        proc = _meshctl_popen("inbox", "--json", env=env)
        assert proc.stdout is not None

        proc.stdout.read(10)
        code, err = _finish(proc)

        assert code == 1, err
        assert self._unread(meshctl, env) == ids

    def test_read_in_full_marks_all(
        self, meshctl: Meshctl, inbox_of_12: tuple[dict[str, str], list[int]]
    ) -> None:
        env, _ = inbox_of_12

        run = ok(meshctl("inbox", env=env))

        assert run.out.count("[from ") == 12
        assert self._unread(meshctl, env) == []

    def test_follow_acks_only_what_was_read(
        self, meshctl: Meshctl, inbox_of_12: tuple[dict[str, str], list[int]]
    ) -> None:
        """inbox --follow whose reader leaves: the item cut off stays unread, exit 1."""
        env, ids = inbox_of_12
        proc = _meshctl_popen("inbox", "--follow", env=env)
        assert proc.stdout is not None

        proc.stdout.read(5)
        code, err = _finish(proc)

        assert code == 1, err
        assert self._unread(meshctl, env) == ids

    def test_handoff_request_never_exits_0_unread(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """handoff request whose reader left: exit 1, and the stored handoff is named."""
        me = register(meshctl, daemon.env)
        other = register(meshctl, daemon.env, task="writing docs")
        env = {**daemon.env, "MESH_SESSION": me}
        proc = _meshctl_popen("handoff", "request", other, env=env)

        code, err = _finish(proc)
        saved = ok(meshctl("handoff", "list", "--json", env=env)).json()

        assert code == 1, err
        assert f"meshctl handoff show {saved[0]['id']}" in err

    def test_unread_answer_is_not_exit_0(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """An answer is not kept once given: an ask whose output was not read exits 1."""
        me = register(meshctl, daemon.env)
        other = register(meshctl, daemon.env, task="writing docs")
        proc = _meshctl_popen(
            "sessions", "ask", other, "status?", env={**daemon.env, "MESH_SESSION": me}
        )

        code, err = _finish(proc)

        assert code == 1, err
        assert "ask again" in err


# --- terminal escape injection -----------------------------------------------------------

EVIL = "x\x1b]0;pwned\x07\x1b[2J\x1b]52;c;ZXZpbA==\x07\r\u202eexe.txt"
FORGED = "\n- cli:forged — a fake session line, status: idle, 1s ago"
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


class TestSafe:
    """The one function that owns neutralising (``_output.safe``), and its document form."""

    def test_escapes_visibly(self) -> None:
        shown = _output.safe("a\x1b[2Jb\rc\u202ed\ne\tf\x85" + os.fsdecode(b"\xe9"))

        assert shown == "a\\x1b[2Jb\\rc\\u202ed\\ne\\tf\\x85\\xe9"

    def test_prose_keeps_its_lines(self) -> None:
        assert _output.safe("one\ntwo\tthree\r", multiline=True) == "one\ntwo\tthree\\r"

    @pytest.mark.parametrize("multiline", [False, True])
    def test_every_code_point(self, multiline: bool) -> None:
        """Exactly the unsafe characters are escaped, wherever they sit in the text: the
        shortcut for text without any (``str.isprintable``) skips none of them. (Every
        unsafe one is below U+E000, the rest of the plane too is read as it is.)"""
        unsafe = {*range(0x20), *range(0x7F, 0xA0), 0x61C, 0x200E, 0x200F}
        unsafe |= {*range(0x2028, 0x202F), *range(0x2066, 0x206A), *range(0xD800, 0xE000)}
        if multiline:
            unsafe -= {ord("\n"), ord("\t")}
        points = [*range(0xE100), *range(0xE100, 0x110000, 7)]

        def escaped(text: str) -> bool:
            return _output.safe(text, multiline=multiline) != text

        assert {c for c in points if escaped(f"a{chr(c)}")} == unsafe
        if multiline:  # prose with its own line breaks and tabs around the character
            assert {c for c in points if escaped(f"x\n\ty{chr(c)}")} == unsafe

    def test_clean_keeps_lines_only_in_prose_fields(self) -> None:
        doc = {"task": "a\nb", "text": "a\nb", "claims": [{"reason": "c\nd"}], "id": 3}

        assert _output.clean(doc) == {
            "task": "a\\nb",
            "text": "a\nb",
            "claims": [{"reason": "c\\nd"}],
            "id": 3,
        }


class TestNoTerminalInjection:
    """Text from another session reaches the terminal neutralised, JSON faithful."""

    def test_every_human_view_escapes_it(
        self, meshctl: Meshctl, daemon: Daemon, short_tmp: Path
    ) -> None:
        evil = register(meshctl, daemon.env, task=EVIL + FORGED)
        me = register(meshctl, daemon.env, task="reader")
        as_evil = {**daemon.env, "MESH_SESSION": evil}
        env = {**daemon.env, "MESH_SESSION": me}
        target = short_tmp / "a.py"
        ok(meshctl("send", me, EVIL + FORGED, env=as_evil))
        ok(meshctl("claim", str(target), "--reason", EVIL, env=as_evil))
        ok(meshctl("handoff", "write", EVIL + FORGED, "--next", EVIL, env=as_evil))

        views = {
            args: meshctl(*args, env=env)
            for args in (
                ("sessions", "active"),
                ("sessions", "show", evil),
                ("sync",),
                ("inbox", "--peek"),
                ("check", str(target)),
                ("log",),
                ("handoff", "list"),
            )
        }
        listing = views["sessions", "active"].out.splitlines()
        faithful = ok(meshctl("inbox", "--peek", "--json", env=env)).json()

        for args, run in views.items():
            assert run.code in (0, 75), run
            assert RAW.search(run.out) is None, (args, run.out)
            assert "\\x1b]0;pwned\\x07" in run.out, (args, run.out)
        assert not [line for line in listing if line.startswith("- cli:forged")]
        assert len(listing) == 3  # header, evil, me
        assert faithful[0]["text"] == EVIL + FORGED

    def test_bidi_or_control_in_a_key_is_bad_key(self, meshctl: Meshctl, daemon: Daemon) -> None:
        env = {**daemon.env, "MESH_SESSION": register(meshctl, daemon.env)}

        bidi = meshctl("claim", "res:invoice\u202efdp.exe", "--json", env=env)
        esc = meshctl("claim", "res:a\x1b[2Jb", env=env)

        assert bidi.code == 1, bidi
        assert bidi.json()["error"]["data"]["code"] == "BAD_KEY"
        assert "\u202e" not in bidi.err
        assert "\\u202e" in bidi.err
        assert esc.code == 1, esc
        assert "\x1b" not in esc.err


class TestAnswersStateTheFacts:
    """Own handoffs are labelled as own; check says each thing once."""

    def test_own_handoff_is_not_from_another_session(
        self, meshctl: Meshctl, daemon: Daemon
    ) -> None:
        me = register(meshctl, daemon.env)
        env = {**daemon.env, "MESH_SESSION": me}
        written = ok(meshctl("handoff", "write", "done with auth", "--json", env=env)).json()

        listed = ok(meshctl("handoff", "list", env=env))
        shown = ok(meshctl("handoff", "show", str(written["id"]), env=env))

        assert "[written by this session]" in listed.out
        assert "[written by this session]" in shown.out
        assert "another session of yours" not in listed.out + shown.out

    def test_check_one_line_per_session(
        self, meshctl: Meshctl, daemon: Daemon, short_tmp: Path
    ) -> None:
        """Two claims of one holder: one held line; 8 sessions working there: 5 and a count."""
        holder = register(meshctl, daemon.env)
        for name in ("a.py", "b.py"):
            ok(meshctl("claim", str(short_tmp / name), env={**daemon.env, "MESH_SESSION": holder}))
        for n in range(8):
            params = {"task": f"w{n}", "cwd": str(short_tmp), "liveness": "heartbeat"}
            daemon.call("session.register", params)

        run = meshctl("check", str(short_tmp), env=daemon.env)
        lines = run.out.splitlines()

        assert run.code == 75, run
        assert len(lines) == len(set(lines)), run.out
        held = [line for line in lines if line.startswith("held:")]
        assert len(held) == 1
        assert held[0].startswith(f"held: {holder} holds 2 claims here: {short_tmp}/a.py, ")
        assert len([line for line in lines if line.startswith("notice:")]) == 6
        assert lines[-1] == "notice: … and 3 more session(s) working there (--json lists them)"


class TestSaysWhatItDoes:
    """Ctrl-C is 130 without 'Aborted!'; a mistyped command gets a suggestion."""

    @pytest.mark.parametrize(
        ("args", "suggestion"),
        [
            (["sesions"], "'sessions'"),
            (["sessions", "activ"], "'active'"),
            (["clam"], "'claim' or 'claude'"),
        ],
    )
    def test_did_you_mean(
        self, args: list[str], suggestion: str, meshctl: Meshctl, offline_env: OfflineEnv
    ) -> None:
        run = meshctl(*args, env=offline_env.env)

        assert run.code == 2, run
        assert f"Did you mean {suggestion}?" in run.err

    def test_ctrl_c_while_waiting_exits_130_quietly(self, meshctl: Meshctl, daemon: Daemon) -> None:
        holder = register(meshctl, daemon.env)
        ok(meshctl("claim", "res:busy", env={**daemon.env, "MESH_SESSION": holder}))
        waiter = register(meshctl, daemon.env)
        proc = subprocess.Popen(
            as_at_a_terminal(
                [sys.executable, "-m", "meshctl.cli", "claim", "res:busy", "--wait", "60"]
            ),
            # a hang (seen once under load, never alone) dumps every thread's stack below
            env={**daemon.env, "MESH_SESSION": waiter, "PYTHONFAULTHANDLER": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        wait_for(
            lambda: bool(daemon.call("claim.list")["result"].get("waiting")),
            what="the waiter queued",
        )

        proc.send_signal(signal.SIGINT)
        try:
            _out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler writes the stacks to stderr
            _out, err = proc.communicate(timeout=10)
            pytest.fail("meshctl did not exit after SIGINT; its stacks:\n" + err.decode())

        assert proc.returncode == 130, err
        assert b"Aborted" not in err
        assert b"Traceback" not in err


class TestWaitingLine:
    def test_undecodable_argument_is_drawn_escaped(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The countdown on a terminal shows argv bytes escaped; it never dies encoding them."""
        from meshctl.cli._waiting import waiting

        class Terminal(io.TextIOWrapper):
            def isatty(self) -> bool:
                return True

        raw = io.BytesIO()
        monkeypatch.setattr(sys, "stderr", Terminal(raw, encoding="utf-8", write_through=True))

        with waiting("claim " + os.fsdecode(b"res:caf\xe9"), 60):
            wait_for(lambda: b"s left" in raw.getvalue(), what="the line drawn")

        assert b"res:caf\\xe9" in raw.getvalue()
