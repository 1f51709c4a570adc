"""Names that match nothing are said, not passed over: each refusal names what it did
not find, and nothing is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import Meshctl


class TestHermesInstall:
    def test_no_hermes_home_is_refused_and_not_created(
        self, meshctl: Meshctl, offline_env: Any
    ) -> None:
        home = offline_env.root / "home"
        home.mkdir()
        env = {**offline_env.env, "HOME": str(home)}
        env.pop("HERMES_HOME", None)

        r = meshctl("hermes", "install", env=env)

        assert r.code == 1, r
        assert f"no Hermes home at {home / '.hermes'}: Hermes Agent is not installed" in r.err
        assert "nothing was written" in r.err
        assert not (home / ".hermes").exists()

    def test_a_mistyped_profile_names_the_profiles_there(
        self, meshctl: Meshctl, offline_env: Any
    ) -> None:
        home = offline_env.root / "home"
        (home / ".hermes" / "profiles" / "work").mkdir(parents=True)
        env = {**offline_env.env, "HOME": str(home)}
        env.pop("HERMES_HOME", None)

        r = meshctl("hermes", "install", "--profile", "wrok", env=env)

        assert r.code == 1, r
        assert "no Hermes profile wrok" in r.err
        assert "the profiles there: work" in r.err
        assert not Path(home / ".hermes" / "profiles" / "wrok").exists()


def live(meshctl: Meshctl, env: dict[str, str], sid: str) -> str:
    r = meshctl("register", "--id", sid, "--task", "t", "--liveness", "heartbeat", env=env)
    assert r.code == 0, r
    return r.out.strip()


class TestSessionIds:
    def test_register_parent_nosuch(self, meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
        env = mesh_env.env
        parent = live(meshctl, env, "cli:20261201-1a8041")

        r = meshctl("register", "--task", "child", "--parent", "nosuch", env=env)
        short = meshctl("register", "--task", "child", "--parent", "cli:2026", "--json", env=env)

        assert r.code == 1, r
        assert "no session nosuch in profile test" in r.err
        assert r.out == ""
        assert short.code == 0, short
        child = meshctl("sessions", "show", short.json()["session_id"], "--json", env=env).json()
        assert child["parent"] == parent

    def test_handoff_write_to_nosuch(self, meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
        env = mesh_env.env
        me = live(meshctl, env, "cli:20261201-1a8041")

        r = meshctl("handoff", "write", "notes", "--to", "cli:20261201-1a8014", "--session", me,
                    env=env)  # fmt: skip

        assert r.code == 1, r
        assert f"no session cli:20261201-1a8014 in profile test; did you mean {me}?" in r.err
        listed = meshctl("handoff", "list", "--all", "--session", me, "--json", env=env)
        assert listed.json() == []

    def test_notes_list_nosuch(self, meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
        env = mesh_env.env
        me = live(meshctl, env, "cli:20261201-1a8041")
        assert meshctl("notes", "add", "API base is /v2", "--session", me, env=env).code == 0

        r = meshctl("notes", "list", "nosuch", env=env)
        short = meshctl("notes", "list", "cli:2026", env=env)

        assert r.code == 1, r
        assert "no notes by nosuch, and no session nosuch in profile test" in r.err
        assert short.code == 0, short
        assert "API base is /v2" in short.out


class TestLedgerKeys:
    def test_resolve_free_of_no_entry(self, meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
        env = mesh_env.env
        ran = meshctl("once", "--key", "report:2026-11-30", "--", "true", env=env)
        assert ran.code == 0, ran

        r = meshctl("once", "--resolve", "report:2026-11-03", "free", env=env)
        done = meshctl("once", "--resolve", "report:2026-12-01", "done", env=env)

        assert r.code == 1, r
        assert (
            "no ledger entry report:2026-11-03: nothing to free; did you mean report:2026-11-30?"
        ) in r.err
        assert done.code == 0, done
        assert "report:2026-12-01 had no entry (nothing ran under it): recorded done by hand" in (
            done.err
        )


class TestConfigProfiles:
    def test_doctor_names_a_profile_table_nobody_uses(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any
    ) -> None:
        env = mesh_env.env
        mesh_env.write_config("[profiles.tset]\nstale_after = 30\n")

        r = meshctl("doctor", env=env)

        assert "[profiles.tset] names no profile used here (used: test); did you mean test?" in (
            r.out
        )

    def test_reload_names_a_profile_table_nobody_uses(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any
    ) -> None:
        """Where a person who just edited the file looks: ``daemon reload`` says it too
        (the reload itself succeeds: the table is valid, only unused)."""
        env = mesh_env.env
        mesh_env.write_config("[profiles.tset]\nstale_after = 30\n")

        r = meshctl("daemon", "reload", env=env)
        fine = "[profiles.test]\nstale_after = 30\n"
        mesh_env.write_config(fine)
        quiet = meshctl("daemon", "reload", env=env)

        assert r.code == 0, r
        assert r.out == f"Config reloaded from {mesh_env.config} (profile test).\n"
        assert (
            "[profiles.tset] names no profile used here (used: test); did you mean test?"
        ) in r.err
        assert quiet.code == 0, quiet
        assert quiet.err == ""


class TestBlankTask:
    """``--task ''`` is what ``--task "$TASK"`` gives when the variable is unset: a
    session whose line says nothing to the others (``— ,`` in ``sessions active``), and
    with ``MESH_SESSION`` set the reused session's task wiped. Refused as a usage error;
    leaving ``--task`` out of ``heartbeat`` keeps the task."""

    def test_register_refuses_an_empty_or_blank_task(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any
    ) -> None:
        env = mesh_env.env

        empty = meshctl("register", "--task", "", env=env)
        blank = meshctl("register", "--task", "   ", "--liveness", "heartbeat", env=env)

        for r in (empty, blank):
            assert r.code == 2, r
            assert "--task is empty: say in a few words what this session does" in r.err
            assert r.out == ""
        assert meshctl("sessions", "active", "--json", env=env).json() == []

    def test_heartbeat_refuses_a_blank_task_and_keeps_the_old_one(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any
    ) -> None:
        env = mesh_env.env
        me = live(meshctl, env, "cli:20261201-1a8041")

        r = meshctl("heartbeat", "--task", "", "--session", me, env=env)

        assert r.code == 2, r
        assert "--task is empty" in r.err
        shown = meshctl("sessions", "show", me, "--json", env=env).json()
        assert shown["task"] == "t"


@pytest.mark.parametrize("option", ["--id", "--parent"])
@pytest.mark.parametrize("value", ["", "  "])
def test_register_refuses_an_empty_id_or_parent(
    option: str, value: str, meshctl: Meshctl, daemon: Any, mesh_env: Any
) -> None:
    """``--id "$ID"`` with ID unset: the daemon was sent no id and the CLI said "this
    method acts for a session, and none was given", with the hint to run ``meshctl
    register`` (exit 1); ``--parent ''`` registered an orphan without a word. Both are
    usage errors that say the value is empty and what leaving it out does (fails before)."""
    env = mesh_env.env

    r = meshctl("register", "--task", "t", "--liveness", "heartbeat", option, value, env=env)

    assert r.code == 2, r
    assert f"Invalid value for {option}: must not be empty" in r.err, r
    assert r.out == ""
    assert meshctl("sessions", "active", "--json", env=env).json() == []
