"""``meshctl fleet status`` and ``meshctl send`` say what mail across hosts is doing."""

from __future__ import annotations

from meshctl.cli.fleet import render_status


def status(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {
        "configured": True, "connected": False, "host": "h1", "urls": ["nats://x:4222"],
        "since_s": 3.0, "hosts": [], "shared_kinds": [], "shared_paths": [],
        "on_partition": "fail", "local_only": [],
    }  # fmt: skip
    base.update(kw)
    return base


def test_status_shows_the_outbox_waiting_while_cut_off() -> None:
    mail = {"outbox": 2, "published": 5, "taken": 7, "duplicates_dropped": 1}
    text = render_status(status(parts={"mail": mail}))

    assert (
        "Mail across hosts: 2 waiting to be sent (sent when the link is back); "
        "5 sent, 7 taken in, 1 copies dropped"
    ) in text


def test_status_without_the_mail_part_says_nothing_of_it() -> None:
    assert "Mail across hosts" not in render_status(status(parts={}))
