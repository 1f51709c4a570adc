"""Fifth conformance audit: the command line met as a new user meets it (README top to
bottom, every example of SPEC §2, §4 to §7, §9), against a real daemon; each test a
defect found that way (docs/CONFORMANCE.md)."""

from __future__ import annotations

from .conftest import Meshctl
from .test_conformance_audit import Daemon, MeshEnv, as_, ok, register  # first audit's


def test_sessions_active_names_the_source_an_id_does_not_say(
    meshctl: Meshctl, daemon: Daemon
) -> None:
    """SPEC §4 gives every session a ``source``; a Hermes session's id is Hermes's own,
    so ``sessions active`` showed a CLI session and a gateway chat alike. The human line
    adds the source after an id that does not start with it; ``--json`` is unchanged."""
    register(meshctl, daemon, "20261201_101010_ab12cd", "--source", "gateway:telegram")
    register(meshctl, daemon, "20261201_101011_ef34ab", "--source", "cli")
    register(meshctl, daemon, "cli:20261129-1f3a9c", "--source", "cli")

    human = ok(meshctl("sessions", "active", env=daemon.env)).out
    listed = ok(meshctl("sessions", "active", "--json", env=daemon.env)).json()

    assert "- 20261201_101010_ab12cd (gateway:telegram) — t," in human, human
    assert "- 20261201_101011_ef34ab (cli) — t," in human, human
    assert "- cli:20261129-1f3a9c — t," in human, human  # the id says it already
    assert {s["session_id"]: s["source"] for s in listed}["20261201_101010_ab12cd"] == (
        "gateway:telegram"
    )


class TestDisabledSaysNothingWasRecorded:
    """SPEC §2: with ``enabled = false`` the daemon records nothing. ``notes add`` said
    ``Noted (#0, note).``, ``board post`` ``Posted progress on the board of .``, ``board
    changed`` ``Recorded 0 changed files in ?.``: a user's words silently dropped behind
    a success line. Each says on stderr that the mesh is disabled and nothing was
    recorded, prints no success line, and still exits 0 (a no-op, as ``claim``)."""

    def test_notes_and_board_writes(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        register(meshctl, daemon, "cli:w")
        mesh_env.write_config("[defaults]\nenabled = false\n")
        ok(meshctl("daemon", "reload", env=daemon.env))
        env = as_(daemon, "cli:w")

        for args in (
            ("notes", "add", "remember this"),
            ("board", "post", "progress", "step 1", "--project", "p"),
            ("board", "changed", "/tmp/x/a.py"),
            ("board", "touch", "/tmp/x/a.py", "--read"),
            ("board", "watch", "/tmp/x"),
        ):
            run = ok(meshctl(*args, env=env))
            assert "the mesh is disabled" in run.err, run
            assert "nothing was recorded" in run.err, run
            assert run.out == "", run
            assert ok(meshctl(*args, "--json", env=env)).json()["disabled"] is True


def test_mesh_disabled_error_says_how_to_switch_it_on(
    meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
) -> None:
    """SPEC §9 exit 1: "the message says what and what to do". ``send`` while disabled
    said the same thing twice ("disabled in config (enabled = false)" / "switched off
    (enabled = false in config.toml)"); the hint now says how to switch it on."""
    register(meshctl, daemon, "cli:a")
    mesh_env.write_config("[defaults]\nenabled = false\n")
    ok(meshctl("daemon", "reload", env=daemon.env))

    run = meshctl("send", "cli:a", "hi", env=as_(daemon, "cli:a"))

    assert run.code == 1, run
    assert "meshctl daemon reload" in run.err, run


class TestRefusalsInPlainWords:
    """SPEC §9 exit 2: a usage error says what is wrong with what the user typed. The
    daemon's schema words came through as "is not in the accepted form" (which form?)
    and "Object missing required field reason" (for ``--reason ''``)."""

    def test_a_value_with_a_space_says_no_spaces(self, meshctl: Meshctl, daemon: Daemon) -> None:
        register(meshctl, daemon, "cli:a")
        for args in (
            ("signal", "emit", "build done"),
            ("register", "--task", "t", "--id", "my session"),
            ("inbox", "--session", "my session"),
        ):
            run = meshctl(*args, env=as_(daemon, "cli:a"))
            assert run.code == 2, run
            assert "no spaces" in run.err, run
            assert "accepted form" not in run.err, run

    def test_an_empty_required_option_says_empty(self, meshctl: Meshctl, daemon: Daemon) -> None:
        register(meshctl, daemon, "cli:a")
        run = meshctl("steal", "res:x", "--reason", "", env=as_(daemon, "cli:a"))
        assert run.code == 2, run
        assert "--reason: must not be empty" in run.err, run
        assert "Object missing" not in run.err, run

    def test_sessions_show_of_an_empty_id(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """``sessions show ''`` said "this method acts for a session, and none was given
        … export MESH_SESSION=…" (exit 1): ID is the session to show, not one to act for."""
        run = meshctl("sessions", "show", "", "--json", env=daemon.env)
        assert run.code == 2, run
        assert "ID: must not be empty" in run.err, run
        assert "MESH_SESSION" not in run.err, run


def test_sync_alone_says_none_besides_you(meshctl: Meshctl, daemon: Daemon) -> None:
    """``meshctl sync`` of the only live session read "Live sessions (no besides you):"."""
    register(meshctl, daemon, "cli:alone")
    out = ok(meshctl("sync", env=as_(daemon, "cli:alone"))).out
    assert "Live sessions (none besides you):" in out, out
