"""``meshctl doctor``'s ``hermes`` line on a machine with the real Hermes 0.19.0."""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import DaemonHandle
from tests.hermes.conftest import Hermes


def hermes_check(h: Hermes) -> dict[str, Any]:
    done = h.meshctl("doctor", "--json")
    assert done.returncode == 0, done.stderr
    [check] = [c for c in json.loads(done.stdout)["checks"] if c["name"] == "hermes"]
    return check  # type: ignore[no-any-return]


def test_doctor_says_the_plugin_is_installed_enabled_and_its_daemon_up(
    hermes: Hermes, daemon: DaemonHandle
) -> None:
    """It said nothing of Hermes at all: a user could not tell from doctor whether their
    Hermes sessions were on the mesh."""
    hermes.install()

    check = hermes_check(hermes)

    assert check["status"] == "ok", check
    assert "meshd plugin" in check["message"]
    assert "enabled in Hermes" in check["message"]


def test_doctor_says_hermes_is_here_without_the_plugin(hermes: Hermes) -> None:
    check = hermes_check(hermes)

    assert check["status"] == "info", check
    assert "not enabled in any" in check["message"]
    assert check["fix"] == "meshctl hermes install --all-profiles"


def test_doctor_warns_when_the_daemon_hermes_needs_is_down(hermes: Hermes) -> None:
    """The plugin never starts meshd: a profile whose daemon is down is off the mesh,
    which is worth a warning here (the daemon line only says one starts on demand)."""
    hermes.install()

    check = hermes_check(hermes)

    assert check["status"] == "warn", check
    assert "Hermes never starts it" in check["message"]
    assert check["fix"].startswith("meshctl daemon start --profile ")


def test_doctor_flags_an_outdated_copy(hermes: Hermes, daemon: DaemonHandle) -> None:
    hermes.install()
    record = hermes.home / "plugins" / "meshd" / "meshd-install.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "version": "0.0.1"}))

    check = hermes_check(hermes)

    assert check["status"] == "warn", check
    assert "0.0.1" in check["message"]
    assert check["fix"].startswith("meshctl hermes install")
