"""Sixth conformance audit: SPEC §2, §4, §5, §7, §8, §9 and §12 tried clause by clause
with the real command line, daemon and socket; each test a defect found that way
(docs/CONFORMANCE.md)."""

from __future__ import annotations

import getpass
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import Meshctl, OfflineEnv, Run
from .test_conformance_audit import Daemon, MeshEnv, as_, ok, register  # first audit's


@pytest.mark.parametrize("name", [".", "..", "nl\n"])
def test_a_profile_name_outside_the_rule_is_a_usage_error(
    meshctl: Meshctl, offline_env: OfflineEnv, name: str
) -> None:
    """SPEC §2: profile names are ``[A-Za-z0-9_.-]{1,64}``. ``--profile ..`` (and
    ``MESH_PROFILE=.``) got past the option's check and failed later as "internal error
    … this is a bug in meshctl" (exit 1); a name with a trailing newline was taken (the
    pattern's ``$`` matches before one), and a daemon served a socket called
    ``nl\\n.sock``. Both are usage errors now, from the CLI and from ``meshd run``, and
    nothing is created."""
    env = {k: v for k, v in offline_env.env.items() if k != "MESH_SOCKET"}
    runs = [
        meshctl("--profile", name, "daemon", "status", env=env),
        meshctl("daemon", "status", env={**env, "MESH_PROFILE": name}),
    ]
    for run in runs:
        assert run.code == 2, run
        assert "A-Z a-z 0-9 _ . -" in run.err, run
        assert "internal error" not in run.err, run

    served = subprocess.run(
        [sys.executable, "-m", "meshd", "run", "--profile", name],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert served.returncode != 0, served
    assert "invalid profile name" in served.stderr, served
    assert not (offline_env.root / "run" / "meshd").exists()


def test_a_refused_profile_name_says_where_it_came_from_and_why(
    meshctl: Meshctl, offline_env: OfflineEnv
) -> None:
    """``--profile 'a b'`` was refused as "Invalid value for '--profile' (env var:
    'MESH_PROFILE')", as if the variable were at fault, and ``--profile ..`` was told to
    use characters it already used. The refusal names where the value came from (the
    option, or ``MESH_PROFILE``) and says that ``.`` and ``..`` name folders (fails
    before)."""
    env = {k: v for k, v in offline_env.env.items() if k != "MESH_SOCKET"}

    typed = meshctl("--profile", "a b", "daemon", "status", env=env)
    from_env = meshctl("daemon", "status", env={**env, "MESH_PROFILE": "a b"})
    dots = meshctl("daemon", "status", "--profile", "..", env=env)

    assert typed.code == from_env.code == dots.code == 2, (typed, from_env, dots)
    assert "Invalid value for --profile: 'a b'" in typed.err, typed
    assert "MESH_PROFILE" not in typed.err, typed
    assert "Invalid value for MESH_PROFILE: 'a b'" in from_env.err, from_env
    assert "other than . and .. (they name folders)" in dots.err, dots


def test_removing_another_session_s_note_says_whose_it_is(meshctl: Meshctl, daemon: Daemon) -> None:
    """SPEC §9 ``notes rm NOTE_ID``: the author only. The refusal (``FORBIDDEN``) came
    with the hint for a foreign uid's socket, "the socket belongs to another user; use
    your own MESH_SOCKET", which sent the person after a problem they did not have."""
    register(meshctl, daemon, "cli:author")
    register(meshctl, daemon, "cli:other")
    ok(meshctl("notes", "add", "--session", "cli:author", "keep", "this", env=daemon.env))

    refused = meshctl("notes", "rm", "1", "--session", "cli:other", env=daemon.env)
    as_json = meshctl("notes", "rm", "1", "--session", "cli:other", "--json", env=daemon.env)

    assert refused.code == 1, refused
    assert "only its author removes it" in refused.err, refused
    assert "another user" not in refused.err, refused
    assert "--session cli:author" in refused.err, refused
    assert as_json.json()["error"]["data"]["code"] == "FORBIDDEN", as_json
    assert as_json.json()["error"]["data"]["author"] == "cli:author", as_json
    listed = ok(meshctl("notes", "list", "--session", "cli:other", "--json", env=daemon.env))
    assert [n["text"] for n in listed.json()] == ["keep this"]


def test_a_pause_note_is_bounded_by_max_body_bytes(
    meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
) -> None:
    """SPEC §2: ``max_body_bytes`` bounds note and handoff text, and a pause note is both
    (§5b). It had a fixed 8192-character cap of its own: with ``max_body_bytes`` raised,
    a 9000-byte note was a usage error (exit 2, "at most 8192 characters") though
    ``notes add`` took it; at the default, a note of exactly 8192 bytes was refused as
    8204 (the stored "checkpoint: " prefix counted), and one over the limit was a usage
    error rather than ``TOO_LARGE``."""
    register(meshctl, daemon, "cli:p")
    env = as_(daemon, "cli:p")

    def pause_with(note: str) -> Run:
        ok(meshctl("claim", "res:pn", env=env))
        return meshctl("pause", "--note", note, "--json", env=env)

    exact = pause_with("x" * 8192)
    ok(meshctl("resume", env=env))
    over = pause_with("x" * 8193)
    ok(meshctl("release", env=env))
    mesh_env.write_config("[defaults]\nmax_body_bytes = 20000\n")
    ok(meshctl("daemon", "reload", env=env))
    raised = pause_with("y" * 9000)
    resumed = ok(meshctl("resume", "--json", env=env))

    assert exact.code == 0, exact
    assert over.code == 1, over
    assert over.json()["error"]["data"]["code"] == "TOO_LARGE", over
    assert "8193 bytes" in over.err, over
    assert raised.code == 0, raised
    assert resumed.json()["note"] == "y" * 9000


def test_an_empty_board_path_is_refused_not_taken_for_the_cwd(
    meshctl: Meshctl, daemon: Daemon, short_tmp: Path
) -> None:
    """``board changed ""`` (an unset shell variable: ``board changed "$FILE"``) joined
    the empty path to the cwd and reported the whole folder changed, telling every
    session there; ``board touch "" --read`` and ``board watch ""`` marked the folder.
    An empty path is refused as the daemon refuses it on the wire (a usage error)."""
    register(meshctl, daemon, "cli:w")
    env = as_(daemon, "cli:w")
    runs = [
        meshctl_in(short_tmp, "board", "changed", "", env=env),
        meshctl_in(short_tmp, "board", "touch", "", "--read", env=env),
        meshctl_in(short_tmp, "board", "watch", "", env=env),
    ]
    shown = ok(meshctl("board", "show", f"{short_tmp}/", "--json", env=env)).json()

    for run in runs:
        assert run.code == 2, run
        assert "must not be empty" in run.err, run
    assert shown["changes"] == [], shown
    assert shown["watching"] == [], shown


def meshctl_in(cwd: Path, *args: str, env: dict[str, str]) -> Run:
    """``meshctl ARGS`` run in ``cwd``."""
    done = subprocess.run(
        [sys.executable, "-m", "meshctl.cli", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return Run(list(args), done.returncode, done.stdout, done.stderr)


def test_resolving_a_new_key_done_suggests_another_key_not_itself(
    meshctl: Meshctl, daemon: Daemon
) -> None:
    """``once --resolve KEY done`` of a key with no entry records it and, as a typo is
    likely, names the closest known key. It read the ledger after recording, so the
    closest was the key itself: "recorded done by hand; did you mean pay:2026-12?"."""
    ok(meshctl("once", "--key", "pay:2026-11", "--", "true", env=daemon.env))

    new = ok(meshctl("once", "--resolve", "pay:2026-12", "done", env=daemon.env))
    alone = ok(meshctl("once", "--resolve", "zzz-unrelated", "done", env=daemon.env))

    assert "did you mean pay:2026-11?" in new.err, new
    assert "did you mean pay:2026-12" not in new.err, new
    assert "did you mean" not in alone.err, alone


def test_a_rank_is_recorded_as_set_by_the_os_user_even_with_a_session(
    meshctl: Meshctl, daemon: Daemon
) -> None:
    """SPEC §5b: a rank is "recorded with who set it (the OS user)". With MESH_SESSION
    set (a shell an agent also uses) it was recorded as set by that session, which
    reads as an agent ranking -- the one thing §5b says never happens."""
    register(meshctl, daemon, "cli:agent")
    register(meshctl, daemon, "cli:other")

    ok(meshctl("prioritize", "cli:other", "--rank", "7", env=as_(daemon, "cli:agent")))
    shown = ok(meshctl("sessions", "show", "cli:other", "--json", env=daemon.env)).json()
    log = ok(meshctl("log", "--json", env=daemon.env)).json()

    assert (shown["rank"], shown["rank_by"]) == (7, getpass.getuser())
    assert [e["by"] for e in log if e["action"] == "rank"] == [getpass.getuser()]
