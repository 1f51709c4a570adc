"""Second conformance audit: SPEC statements driven through the real ``meshctl`` and a
real daemon, each a defect found by using the CLI as a user would (docs/CONFORMANCE.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

from tests.support import reaped, wait_for

from .conftest import Meshctl, Run

Daemon = Any
MeshEnv = Any


def ok(run: Run) -> Run:
    assert run.code == 0, run
    return run


def as_(daemon: Daemon, session: str | None = None) -> dict[str, str]:
    env = dict(daemon.env)
    if session is not None:
        env["MESH_SESSION"] = session
    return env


def register(meshctl: Meshctl, daemon: Daemon, sid: str, *extra: str) -> str:
    args = ("register", "--task", "t", "--id", sid, "--pid", str(os.getpid()), *extra)
    return ok(meshctl(*args, env=daemon.env)).out.strip()


def queued_claim(meshctl: Meshctl, daemon: Daemon) -> subprocess.Popen[str]:
    """``meshctl claim res:db --wait 60`` as cli:waiter, running and queued behind
    cli:holder (both registered here)."""
    register(meshctl, daemon, "cli:holder")
    register(meshctl, daemon, "cli:waiter")
    ok(meshctl("claim", "res:db", env=as_(daemon, "cli:holder")))
    waiting = subprocess.Popen(
        [sys.executable, "-m", "meshctl.cli", "claim", "res:db", "--wait", "60"],
        env=as_(daemon, "cli:waiter"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: daemon.call("claim.list", {})["result"].get("waiting"),
            what="the queued wait",
        )
    except BaseException:
        with reaped(waiting):  # never seen queued: killed, its pipes closed
            raise
    return waiting


class TestJsonEverywhere:
    def test_completion_show_json_is_one_document(self, meshctl: Meshctl) -> None:
        """SPEC §9: ``--json`` on every command prints exactly one JSON document; the
        completion script is carried in it, not printed bare."""
        run = ok(meshctl("completion", "show", "bash", "--json"))

        doc = run.json()
        assert doc["shell"] == "bash"
        assert "_meshctl_completion" in doc["script"]


class TestRefusalNamesTheArgument:
    def test_a_bad_register_id_names_id_not_session(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """The id the user typed after ``--id`` is what the usage error names."""
        run = meshctl("register", "--task", "t", "--id", "bad id", env=daemon.env)

        assert run.code == 2, run
        assert run.err.startswith("meshctl: --id: "), run
        assert "MESH_SESSION" not in run.err

    def test_a_bad_id_argument_names_the_argument(self, meshctl: Meshctl, daemon: Daemon) -> None:
        for args in (("prioritize", "bad id", "--rank", "1"), ("sessions", "show", "bad id")):
            run = meshctl(*args, env=daemon.env)

            assert run.code == 2, run
            assert run.err.startswith("meshctl: ID: "), run

    def test_raw_call_does_not_blame_session(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """``meshctl call`` sends the user's own JSON: the refusal keeps the wire path."""
        run = meshctl("call", "session.get", '{"session_id": 5}', "--json", env=daemon.env)

        assert run.code != 0, run
        assert "--session" not in run.err
        assert run.json()["error"]["data"]["path"] == "$.session_id"


class TestWords:
    def test_board_show_says_watches(self, meshctl: Meshctl, daemon: Daemon, tmp_path: Any) -> None:
        register(meshctl, daemon, "cli:w")
        ok(meshctl("board", "watch", str(tmp_path), env=as_(daemon, "cli:w")))

        shown = ok(meshctl("board", "show", str(tmp_path), env=daemon.env)).out

        assert f"- cli:w watches {tmp_path}" in shown
        assert "watchs" not in shown

    def test_follow_shows_no_none_id_for_a_changed_file_notice(
        self, meshctl: Meshctl, daemon: Daemon, tmp_path: Any
    ) -> None:
        """A ``file.changed`` event is not an inbox item: ``inbox --follow`` shows it
        without an ``#None`` for the id it does not have."""
        register(meshctl, daemon, "cli:reader")
        register(meshctl, daemon, "cli:writer")
        ok(meshctl("board", "watch", str(tmp_path), env=as_(daemon, "cli:reader")))
        follower = subprocess.Popen(
            [sys.executable, "-m", "meshctl.cli", "inbox", "--follow"],
            env=as_(daemon, "cli:reader"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert follower.stderr is not None
            assert follower.stdout is not None
            wait_for(lambda: "following" in follower.stderr.readline(), what="the follower")
            ok(meshctl("board", "changed", str(tmp_path / "a.py"), env=as_(daemon, "cli:writer")))
            head, body = follower.stdout.readline(), follower.stdout.readline()
        finally:
            follower.terminate()
            follower.communicate(timeout=10)

        assert head.startswith("[from cli:writer"), head
        assert "#None" not in head
        assert "cli:writer changed a.py" in body, body


class TestDisabled:
    def test_end_is_a_no_op_when_disabled(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        """SPEC §2: with ``enabled = false`` register succeeds as a no-op; the ``end``
        that closes the same script is a no-op too (exit 0, ``disabled: true``), not
        an unknown-session error."""
        mesh_env.write_config("[defaults]\nenabled = false\n")
        ok(meshctl("daemon", "reload", env=daemon.env))
        sid = ok(meshctl("register", "--task", "t", env=daemon.env)).out.strip()

        ended = meshctl("end", "--session", sid, "--json", env=daemon.env)
        human = meshctl("end", "--session", sid, env=daemon.env)

        assert ended.code == 0, ended
        assert ended.json()["disabled"] is True
        assert human.code == 0, human
        assert "disabled" in human.err

    def test_check_does_not_say_it_claimed(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        mesh_env.write_config("[defaults]\nenabled = false\n")
        ok(meshctl("daemon", "reload", env=daemon.env))

        run = ok(meshctl("check", "res:db", env=daemon.env))

        assert "disabled" in run.err
        assert "claimed" not in run.err


class TestAuditLog:
    def test_a_rank_set_is_in_the_audit_log(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """SPEC §5b: priorities, preemption and pause -- "All of it is in the audit
        log": ``prioritize`` leaves a row with the rank, who set it and when."""
        register(meshctl, daemon, "cli:hi")
        ok(meshctl("prioritize", "cli:hi", "--rank", "10", env=daemon.env))

        rows = ok(meshctl("log", "--json", env=daemon.env)).json()
        human = ok(meshctl("log", env=daemon.env)).out

        ranked = [r for r in rows if r["action"] == "rank"]
        assert len(ranked) == 1, rows
        assert ranked[0]["session_id"] == "cli:hi"
        assert ranked[0]["how"] == "rank 10 (was 0)"
        assert ranked[0]["by"]
        assert "rank cli:hi (rank 10 (was 0), by " in human, human


class TestSignalTimeout:
    def test_a_timed_out_wait_has_the_signal_fields(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """SPEC §9's ``signal wait`` shape holds on a timeout too (exit 75): the same
        keys, null, so a script reads ``.seq`` either way."""
        run = meshctl("signal", "wait", "never", "--timeout", "0.2", "--json", env=daemon.env)

        assert run.code == 75, run
        doc = run.json()
        assert doc["name"] == "never"
        for key in ("seq", "payload", "emitted_by", "emitted_at"):
            assert key in doc, doc
            assert doc[key] is None, doc
        assert doc["received"] is False


class TestWaitSaysWhatHappened:
    def test_a_capped_wait_says_how_long_it_waited(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        """``--wait`` is capped by ``max_query_timeout`` (SPEC §2); the note says the
        time the wait ran and the cap that ended it, not the time asked for."""
        mesh_env.write_config("[defaults]\nmax_query_timeout = 0.5\n")
        env = daemon.env
        ok(meshctl("daemon", "reload", env=env))
        for sid in ("cli:a", "cli:b"):
            ok(meshctl("register", "--task", "t", "--id", sid, "--pid", str(os.getpid()), env=env))
        ok(meshctl("claim", "res:db", "--session", "cli:a", env=env))

        run = meshctl("claim", "res:db", "--wait", "30", "--session", "cli:b", env=env)

        assert run.code == 75, run
        # the daemon's own count, 0.5 s or a little more on a loaded machine (0.6 s seen)
        ran = re.search(r"the wait ran out after ([\d.]+) s, the longest one wait runs", run.err)
        assert ran is not None, run
        assert 0.5 <= float(ran[1]) < 30, run

    def test_a_wait_withdrawn_by_its_session_end_says_so(
        self, meshctl: Meshctl, daemon: Daemon
    ) -> None:
        """SPEC §5: a waiter is cancelled when its session ends. The waiting ``claim``
        then answers at once (exit 75) and says the wait was withdrawn, not that it
        ran out after the time asked."""
        with reaped(queued_claim(meshctl, daemon)) as waiting:
            ok(meshctl("end", env=as_(daemon, "cli:waiter")))
            out, err = waiting.communicate(timeout=60)

        assert waiting.returncode == 75, (out, err)
        assert "withdrawn" in err, err
        assert "session ended or paused" in err, err
        assert "ran out after 60" not in err


class TestPauseIsClean:
    def test_a_dropped_reservation_is_no_unclean_previous(
        self, meshctl: Meshctl, daemon: Daemon
    ) -> None:
        """SPEC §5: ``previous`` is for a last holder that did not release cleanly. A
        paused session (SPEC §5b: a checkpoint at a safe point) that ends drops its
        reserved set; the next grantee is not warned of an unclean end."""
        for sid in ("cli:low", "cli:high", "cli:next"):
            register(meshctl, daemon, sid)
        ok(meshctl("prioritize", "cli:high", "--rank", "5", env=daemon.env))
        ok(meshctl("claim", "res:db", env=as_(daemon, "cli:low")))
        ok(meshctl("preempt", "res:db", env=as_(daemon, "cli:high")))
        ok(meshctl("pause", "--note", "at a safe point", env=as_(daemon, "cli:low")))
        ok(meshctl("end", env=as_(daemon, "cli:low")))

        got = ok(meshctl("claim", "res:db", "--json", env=as_(daemon, "cli:next")))

        assert got.json()["previous"] is None, got
        assert "did not release it cleanly" not in got.err


class TestErrorCodes:
    def test_an_unknown_job_keeps_the_not_found_code(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        """SPEC §3: a mesh error has a fixed numeric code for its ``data.code``; the
        unknown job's NOT_FOUND carries the daemon's (as ``reply`` does), not -32000."""
        mesh_env.write_config('[jobs.backup]\nresources = ["res:disk"]\n')
        ok(meshctl("daemon", "reload", env=daemon.env))

        run = meshctl("job", "run", "nosuch", "--json", "--", "true", env=daemon.env)
        raw = daemon.call("job.get", {"name": "nosuch"})

        assert run.code == 1, run
        error = run.json()["error"]
        assert error["data"]["code"] == "NOT_FOUND"
        assert error["data"]["known"] == ["backup"]
        assert error["code"] == raw["error"]["code"]


class TestCheckWarning:
    def test_the_json_warning_is_the_sentence_check_prints(
        self, meshctl: Meshctl, daemon: Daemon
    ) -> None:
        """SPEC §5: ``check``'s answer reads as a human warning. ``--json``'s
        ``warnings`` carry the very sentence the human form prints after ``held:``
        (the key as written, the claim's reason), not another wording of it."""
        register(meshctl, daemon, "cli:holder")
        register(meshctl, daemon, "cli:sharer")
        register(meshctl, daemon, "cli:me")
        ok(meshctl("claim", "res:db", "--reason", "migrating", env=as_(daemon, "cli:holder")))
        ok(meshctl("claim", "port:8080", "--shared", env=as_(daemon, "cli:sharer")))
        me = as_(daemon, "cli:me")

        for key in ("res:db", "port:8080"):
            human = meshctl("check", key, env=me)
            doc = meshctl("check", key, "--json", env=me).json()

            assert human.code == 75, human
            assert doc["warnings"] == [human.out.strip().removeprefix("held: ")], (doc, human)
        assert doc["warnings"][0].startswith("cli:sharer is sharing port:8080 ")


class TestClockWords:
    def test_a_preemption_says_until_when_not_ago(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        """The grace's end is said as a clock time: the deadline comes in whole
        seconds, and a 1 s grace read "ends 0s ago" the moment it was asked."""
        mesh_env.write_config("[defaults]\npreempt_grace = 1\n")
        ok(meshctl("daemon", "reload", env=daemon.env))
        register(meshctl, daemon, "cli:low")
        register(meshctl, daemon, "cli:boss")
        ok(meshctl("prioritize", "cli:boss", "--rank", "3", env=daemon.env))
        ok(meshctl("claim", "res:gpu", env=as_(daemon, "cli:low")))

        asked = ok(meshctl("preempt", "res:gpu", env=as_(daemon, "cli:boss")))

        assert "grace 1 s, until " in asked.out, asked
        assert "ago" not in asked.out

    def test_one_deferral_is_one_time(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        mesh_env.write_config(
            '[jobs.backup]\nresources = ["res:disk"]\npolicy = "skip"\ncritical = true\n'
        )
        ok(meshctl("daemon", "reload", env=daemon.env))
        register(meshctl, daemon, "cli:holder")
        ok(meshctl("claim", "res:disk", env=as_(daemon, "cli:holder")))
        skipped = meshctl("job", "run", "backup", "--", "true", env=daemon.env)

        radar = ok(meshctl("jobs", env=daemon.env)).out
        sync = ok(meshctl("sync", env=as_(daemon, "cli:holder"))).out

        assert skipped.code == 75, skipped
        assert "deferred 1 time\n" in radar, radar
        assert "backup: deferred 1 time," in sync, sync


class TestLossAtNextClaim:
    def test_a_claim_tells_what_was_lost_meanwhile(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """SPEC §5: a holder that lost a claim while it was not listening learns it
        "at its next ``inbox``/``sync``/``claim``": the next ``claim`` says so (stderr,
        and ``lost`` in ``--json``) for as long as the notice is unread."""
        register(meshctl, daemon, "cli:a")
        register(meshctl, daemon, "cli:b")
        ok(meshctl("claim", "res:x", env=as_(daemon, "cli:a")))
        ok(meshctl("steal", "res:x", "--reason", "need it", env=as_(daemon, "cli:b")))

        human = ok(meshctl("claim", "res:y", env=as_(daemon, "cli:a")))
        doc = ok(meshctl("claim", "res:z", "--json", env=as_(daemon, "cli:a"))).json()
        ok(meshctl("inbox", env=as_(daemon, "cli:a")))
        after = ok(meshctl("claim", "res:w", "--json", env=as_(daemon, "cli:a")))

        assert human.out.startswith("granted res:y"), human
        assert "res:x" in human.err, human
        assert "stolen by cli:b" in human.err, human
        assert [lost["resources"] for lost in doc["lost"]] == [["res:x"]], doc
        assert after.json()["lost"] == [], after
        assert "res:x" not in after.err


class TestFleetCutOff:
    def test_a_fleet_claim_refused_says_the_fleet_not_the_disk(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        """SPEC §12: with ``on_partition = "fail"`` a fleet-wide claim the fleet cannot
        decide fails with ``UNAVAILABLE``; what to do next is about the fleet (``fleet
        status``, ``on_partition``), not the state folder a storage failure points at."""
        mesh_env.write_config("[fleet]\nurl = 'nats://127.0.0.1:1'\n")
        ok(meshctl("daemon", "reload", env=daemon.env))
        register(meshctl, daemon, "cli:a")
        wait_for(  # the fleet starts a tick after the reload; then its link fails
            lambda: daemon.call("fleet.status", {})["result"].get("last_error"),
            what="the fleet link's first failure",
        )

        run = meshctl("claim", "box:vps", env=as_(daemon, "cli:a"))
        doc = meshctl("claim", "box:vps", "--json", env=as_(daemon, "cli:a"))

        assert run.code == 1, run
        assert "meshctl fleet status" in run.err, run
        assert "on_partition" in run.err, run
        assert "state folder" not in run.err, run
        assert doc.json()["error"]["data"]["code"] == "UNAVAILABLE", doc
        assert doc.json()["error"]["data"]["reason"] == "fleet", doc

    def test_a_fleet_claim_before_the_link_runs_is_refused_not_granted(
        self, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        """SPEC §12 (never silently granted twice): in the moment between a reload that
        adds ``[fleet]`` and the fleet link's start (the next sweep tick), a fleet-wide
        claim was granted here alone."""
        assert "result" in daemon.call("session.register", {"session_id": "cli:a"})
        mesh_env.write_config("[fleet]\nurl = 'nats://127.0.0.1:1'\n")
        assert daemon.call("mesh.reload", {})["result"]["reloaded"] is True

        reply = daemon.call("claim.acquire", {"session_id": "cli:a", "resources": ["box:vps"]})

        assert "error" in reply, reply
        assert reply["error"]["data"]["code"] == "UNAVAILABLE", reply
        assert reply["error"]["data"]["reason"] == "fleet", reply


class TestPauseNoteWords:
    def test_the_note_may_be_several_words(self, meshctl: Meshctl, daemon: Daemon) -> None:
        """SPEC §9 writes ``meshctl pause --note TEXT…``: the words after ``--note`` are
        the note, unquoted, as ``send ID TEXT…`` joins its words."""
        register(meshctl, daemon, "cli:p")
        ok(meshctl("claim", "res:p", env=as_(daemon, "cli:p")))

        ok(meshctl("pause", "--note", "stopped", "at", "step", "3", env=as_(daemon, "cli:p")))
        resumed = ok(meshctl("resume", "--wait", "5", "--json", env=as_(daemon, "cli:p")))

        assert resumed.json()["note"] == "stopped at step 3", resumed

    def test_words_without_note_are_a_usage_error(self, meshctl: Meshctl, daemon: Daemon) -> None:
        register(meshctl, daemon, "cli:p")

        run = meshctl("pause", "stopped", env=as_(daemon, "cli:p"))

        assert run.code == 2, run
        assert "--note" in run.err


class TestJobWaitsItsTimeout:
    def test_a_wait_job_waits_past_max_query_timeout(
        self, meshctl: Meshctl, daemon: Daemon, mesh_env: MeshEnv
    ) -> None:
        """SPEC §7: a ``policy = "wait"`` job "waits up to ``timeout``". The daemon caps
        each claim wait at ``max_query_timeout`` (§2), so ``job run`` asks again while
        the job's own timeout has time left (as ``job wait`` does), instead of deferring
        when the first capped wait runs out."""
        mesh_env.write_config(
            "[defaults]\nmax_query_timeout = 1\n"
            '[jobs.report]\nresources = ["res:db"]\npolicy = "wait"\ntimeout = 60\n'
        )
        ok(meshctl("daemon", "reload", env=daemon.env))
        register(meshctl, daemon, "cli:holder")
        ok(meshctl("claim", "res:db", env=as_(daemon, "cli:holder")))
        job = subprocess.Popen(
            [sys.executable, "-m", "meshctl.cli", "job", "run", "report", "--", "echo", "ran"],
            env=daemon.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

        def waits() -> list[Any]:
            return daemon.call("claim.list", {})["result"].get("waiting") or []

        with reaped(job):  # its pipes closed even when it ended before the wait was seen
            first = wait_for(waits, what="the job's queued wait")[0]["since"]
            # the first capped wait ran out and the job asked again (a fixed pause may
            # end before the cap does, on a loaded machine, and the test then proves nothing)
            wait_for(
                lambda: any(w["since"] != first for w in waits()), what="the job's second wait"
            )
            ok(meshctl("release", env=as_(daemon, "cli:holder")))
            out, err = job.communicate(timeout=60)

        assert job.returncode == 0, (out, err)
        assert out == "ran\n", (out, err)


class TestExpireAfterNeedsHeartbeat:
    def test_expire_after_without_heartbeat_liveness_is_a_usage_error(
        self, meshctl: Meshctl, daemon: Daemon
    ) -> None:
        """SPEC §4 gives ``--liveness heartbeat [--expire-after S]``: a ``process``
        session never expires while its process lives, so ``--expire-after`` on one
        was taken and ignored (its reply even said ``expire_after: 5``)."""
        run = meshctl("register", "--task", "t", "--expire-after", "5", env=daemon.env)
        fine = meshctl(
            "register", "--task", "t", "--liveness", "heartbeat", "--expire-after", "5",
            env=daemon.env,
        )  # fmt: skip

        assert run.code == 2, run
        assert "--expire-after needs --liveness heartbeat" in run.err, run
        assert fine.code == 0, fine


class TestResolvedByWhom:
    def test_a_key_resolved_by_hand_says_who_resolved_it(
        self, meshctl: Meshctl, daemon: Daemon
    ) -> None:
        """SPEC §7: a second caller of ``once`` sees ``done`` "(who, when)". A key a
        person resolved without a session said ``session ,`` (nobody); it names the
        person, in the refusal, in ``--list`` and in ``resolved_by``."""
        import getpass

        ok(meshctl("once", "--resolve", "report:1", "done", env=daemon.env))

        run = meshctl("once", "--key", "report:1", "--", "true", env=daemon.env)
        listed = ok(meshctl("once", "--list", env=daemon.env)).out
        entries = ok(meshctl("once", "--list", "--json", env=daemon.env)).json()

        me = getpass.getuser()
        assert run.code == 75, run
        assert f"report:1 is done (resolved by {me}, " in run.err, run
        assert "session ," not in listed, listed
        assert f"resolved by {me}" in listed, listed
        assert [e["resolved_by"] for e in entries if e["key"] == "report:1"] == [me], entries
