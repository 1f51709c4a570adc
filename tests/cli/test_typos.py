"""Names that match nothing are said, not passed over: each refusal names what it did
not find, and nothing is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
