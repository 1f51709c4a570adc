"""``fleet join``/``leave`` edit config.toml as text: only the [fleet] table changes."""

from __future__ import annotations

import tomllib

import pytest

from meshctl.cli.admin.fleet_config import FleetConfigError, with_fleet, without_fleet

FILE = (
    "# mine\n[defaults]\nstale_after = 3  # keep\n\n"
    '[fleet]\nurl = "nats://a:1"\nshared_paths = ["/srv"]\n\n'
    '[jobs.x]\nresources = ["res:x"]\n'
)


def test_join_replaces_the_table_in_place_keeping_its_other_keys() -> None:
    out = with_fleet(FILE, {"url": "tls://b:2", "creds": "/c", "nkey": None})

    assert out == (
        "# mine\n[defaults]\nstale_after = 3  # keep\n\n"
        '[fleet]\nurl = "tls://b:2"\ncreds = "/c"\nshared_paths = ["/srv"]\n\n'
        '[jobs.x]\nresources = ["res:x"]\n'
    )


def test_join_appends_a_table_and_leave_takes_it_out_again() -> None:
    start = "[defaults]\nx = 1"  # no final newline
    joined = with_fleet(start, {"url": "nats://q:1", "name": 'a"b'})

    assert tomllib.loads(joined)["fleet"] == {"url": "nats://q:1", "name": 'a"b'}
    assert without_fleet(joined) == "[defaults]\nx = 1\n"
    assert with_fleet("", {"url": "nats://q:1"}) == '[fleet]\nurl = "nats://q:1"\n'


def test_leave_keeps_everything_else() -> None:
    assert without_fleet(FILE) == (
        '# mine\n[defaults]\nstale_after = 3  # keep\n\n[jobs.x]\nresources = ["res:x"]\n'
    )
    assert without_fleet("[defaults]\n") == "[defaults]\n"


def test_what_cannot_be_edited_safely_is_refused() -> None:
    with pytest.raises(FleetConfigError, match="dotted keys"):
        with_fleet('fleet.url = "nats://a:1"\n', {"url": "nats://b:1"})
    with pytest.raises(FleetConfigError, match="not valid TOML"):
        without_fleet("[fleet\n")
