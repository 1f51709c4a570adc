"""Fourth conformance audit, SPEC §1 and §9: the command line driven as a user drives it,
against a real daemon; each test a defect found that way (docs/CONFORMANCE.md)."""

from __future__ import annotations

import subprocess
import sys

from .conftest import Meshctl
from .test_conformance_audit import Daemon, as_, ok, register  # the first audit's helpers


def test_python_dash_m_meshctl_runs_the_cli() -> None:
    """SPEC §1: ``meshctl`` is importable as ``meshctl`` and its CLI is ``meshctl …``;
    ``python -m meshd`` runs the daemon's command line, so ``python -m meshctl`` runs
    the CLI (a venv whose scripts folder is not on PATH)."""
    done = subprocess.run(
        [sys.executable, "-m", "meshctl", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("meshctl, version ")


def test_reply_to_another_pairs_message_is_refused(meshctl: Meshctl, daemon: Daemon) -> None:
    """SPEC §9 ``meshctl reply MSG_ID TEXT…`` answers a message of one's own; a message
    between two other sessions is not the replier's to answer (nor to learn the sender
    of): NOT_FOUND, exit 1, and nothing is sent. It used to go to that message's
    recipient."""
    for sid in ("cli:a", "cli:b", "cli:c"):
        register(meshctl, daemon, sid)
    sent = ok(meshctl("send", "cli:b", "private to b", "--json", env=as_(daemon, "cli:a")))
    msg_id = str(sent.json()["id"])

    run = meshctl("reply", msg_id, "butting in", "--json", env=as_(daemon, "cli:c"))
    assert run.code == 1, run
    assert run.json()["error"]["data"]["code"] == "NOT_FOUND"
    b_inbox = ok(meshctl("inbox", "--peek", "--json", env=as_(daemon, "cli:b"))).json()
    assert [i["text"] for i in b_inbox] == ["private to b"]
    # the pair itself still replies both ways
    ok(meshctl("reply", msg_id, "thanks", env=as_(daemon, "cli:b")))
    ok(meshctl("reply", msg_id, "more", env=as_(daemon, "cli:a")))


def test_handoff_show_of_an_unknown_id_says_what_to_do(meshctl: Meshctl, daemon: Daemon) -> None:
    """SPEC §9, exit 1: "an error (the message says what and what to do)"."""
    run = meshctl("handoff", "show", "999", env=daemon.env)
    assert run.code == 1, run
    assert run.err.splitlines()[0] == "meshctl: no handoff 999"
    assert "meshctl handoff list --all" in run.err


def test_board_show_of_an_empty_project_is_a_usage_error(meshctl: Meshctl, daemon: Daemon) -> None:
    """SPEC §9, exit 2 "usage error": an empty PROJECT|PATH is the user's typing, as an
    empty NAME of ``signal emit`` is, not the daemon's -32602 with a schema hint."""
    run = meshctl("board", "show", "", "--json", env=daemon.env)
    assert run.code == 2, run
    assert run.json()["error"]["data"]["code"] == "INVALID_PARAMS"
    assert "[PROJECT|PATH]: must not be empty" in run.err


def test_service_takes_systemd_or_launchd_not_both(meshctl: Meshctl, daemon: Daemon) -> None:
    """SPEC §9 ``service install|uninstall|status [--systemd|--launchd]``: alternatives;
    both was taken silently as the last one."""
    for verb in ("status", "install", "uninstall"):
        run = meshctl("service", verb, "--systemd", "--launchd", env=daemon.env)
        assert run.code == 2, run
        assert "give --systemd or --launchd, not both" in run.err
    assert (
        ok(meshctl("service", "status", "--launchd", "--json", env=daemon.env)).json()["manager"]
        == "launchd"
    )


def test_hermes_all_profiles_is_not_combined(meshctl: Meshctl, daemon: Daemon) -> None:
    """SPEC §9 ``hermes install|uninstall|status [--profile NAME | --all-profiles |
    --hermes-home PATH]``: --all-profiles with one of the others was taken silently."""
    for extra in (("--profile", "work"), ("--hermes-home", str(daemon.env["MESH_STATE_DIR"]))):
        run = meshctl("hermes", "status", "--all-profiles", *extra, env=daemon.env)
        assert run.code == 2, run
        assert "give --all-profiles alone" in run.err


def test_call_without_a_session_id_says_to_put_it_in_the_params(
    meshctl: Meshctl, daemon: Daemon
) -> None:
    """SPEC §3 NO_SESSION, through ``meshctl call`` (raw: --session is not added to the
    params): exit 1, data.code NO_SESSION, and the hint says what to do with a raw
    call, not "pass --session ID", which a raw call does not use."""
    register(meshctl, daemon, "cli:a")
    run = meshctl("call", "session.heartbeat", "{}", "--json", env=as_(daemon, "cli:a"))
    assert run.code == 1, run
    assert run.json()["error"]["data"] == {"code": "NO_SESSION", "path": "$.session_id"}
    assert 'put "session_id" in PARAMS_JSON' in run.err
