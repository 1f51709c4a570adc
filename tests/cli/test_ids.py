"""Session ids as people type them: a unique prefix, the part after ``kind:``, a typo;
and ``meshctl whoami``."""

from __future__ import annotations

from typing import Any

from tests.cli.conftest import Meshctl


def register(meshctl: Meshctl, env: dict[str, str], sid: str) -> str:
    r = meshctl("register", "--id", sid, "--task", f"task of {sid}", "--liveness", "heartbeat",
                env=env)  # fmt: skip
    assert r.code == 0, r
    return r.out.strip()


class TestPrefix:
    def test_a_unique_prefix_names_the_session(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any
    ) -> None:
        env = mesh_env.env
        a = register(meshctl, env, "cli:20261201-1a8041")
        b = register(meshctl, env, "cli:20261201-77aa01")

        shown = meshctl("sessions", "show", "cli:20261201-1a", env=env)
        sent = meshctl("send", "--session", b, "cli:20261201-1a", "cli:20261201-1a", env=env)
        after_kind = meshctl("sessions", "show", "20261201-77", "--json", env=env)

        assert shown.code == 0, shown
        assert f"session id:      {a}" in shown.out
        assert sent.code == 0, sent
        assert f"to {a}" in sent.out
        inbox = meshctl("inbox", "--session", a, "--json", env=env).json()
        assert [(i["from"], i["text"]) for i in inbox] == [(b, "cli:20261201-1a")]
        assert after_kind.json()["session_id"] == b

    def test_two_prefixes_in_one_command(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any
    ) -> None:
        """``send`` with a short recipient and a short ``--session``: both resolved (the
        second one was refused, "no session …", once the first had been)."""
        env = mesh_env.env
        a = register(meshctl, env, "cli:20261201-1a8041")
        b = register(meshctl, env, "cli:20261201-77aa01")

        sent = meshctl("send", "20261201-1a", "hello", "--session", "cli:20261201-77", env=env)
        back = meshctl("send", "cli:20261201-77", "hi", "--session", "20261201-1a", env=env)

        assert sent.code == 0, sent
        assert back.code == 0, back
        inbox = meshctl("inbox", "--session", a, "--json", env=env).json()
        assert [(i["from"], i["text"]) for i in inbox] == [(b, "hello")]
        inbox = meshctl("inbox", "--session", b, "--json", env=env).json()
        assert [(i["from"], i["text"]) for i in inbox] == [(a, "hi")]

    def test_session_option_prefix_on_the_fast_path(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any
    ) -> None:
        env = mesh_env.env
        a = register(meshctl, env, "cli:20261201-1a8041")

        claimed = meshctl("claim", "res:db", "--session", "cli:2026", env=env)

        assert claimed.code == 0, claimed
        holders = meshctl("call", "claim.list", env=env).json()["claims"]
        assert [(c["session_id"], c["resource"]) for c in holders] == [(a, "res:db")]

    def test_ambiguous_names_the_matches(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any
    ) -> None:
        env = mesh_env.env
        a = register(meshctl, env, "cli:20261201-1a8041")
        b = register(meshctl, env, "cli:20261201-77aa01")

        r = meshctl("sessions", "show", "cli:2026", env=env)
        j = meshctl("sessions", "show", "cli:2026", "--json", env=env)

        assert r.code == 1, r
        assert f"session id cli:2026 is ambiguous: it matches {a}, {b}; give more of it" in r.err
        assert j.json()["error"]["data"]["matches"] == [a, b]

    def test_a_typo_gets_the_closest(self, meshctl: Meshctl, daemon: Any, mesh_env: Any) -> None:
        env = mesh_env.env
        a = register(meshctl, env, "cli:20261201-1a8041")

        r = meshctl("send", "--session", a, "cli:20261201-1a8014", "hello", env=env)
        j = meshctl("sessions", "show", "cli:20261201-1a8014", "--json", env=env)

        assert r.code == 1, r
        assert f"no session cli:20261201-1a8014 in profile test; did you mean {a}?" in r.err
        assert j.json()["error"]["data"]["did_you_mean"] == a


class TestWhoami:
    def test_says_the_session_of_this_shell(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any
    ) -> None:
        env = mesh_env.env
        a = register(meshctl, env, "cli:20261201-1a8041")

        r = meshctl("whoami", env={**env, "MESH_SESSION": a})
        short = meshctl("whoami", "--json", env={**env, "MESH_SESSION": "cli:2026"})

        assert r.code == 0, r
        assert r.out.startswith(f"{a} — task of {a}, status: idle, in ")
        assert short.json()["session_id"] == a

    def test_none_is_exit_1_with_the_way_to_get_one(
        self, meshctl: Meshctl, daemon: Any, mesh_env: Any
    ) -> None:
        r = meshctl("whoami", env=mesh_env.env)

        assert r.code == 1, r
        assert "export MESH_SESSION=$(meshctl register" in r.err
