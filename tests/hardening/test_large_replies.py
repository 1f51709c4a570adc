"""Large replies: a reply is never dropped for its own size, a big reply
never makes a subscriber "behind" on events, and listings summarise huge claim sets.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests.conftest import DaemonHandle
from tests.hardening.support import CLOSED, Client

from meshd.protocol.methods import LISTED_CLAIMS
from meshd.server.connection import BACKLOG_LIMIT, EVENT_BACKLOG_LIMIT

PAD = "x" * 400


def hold_many(c: Client, sid: str, n: int) -> None:
    """``sid`` claims ``n`` long ``res:`` keys, 256 per call (the most one acquire takes)."""
    for start in range(0, n, 256):
        keys = [f"res:{PAD}{i}" for i in range(start, min(n, start + 256))]
        r = c.call("claim.acquire", {"session_id": sid, "resources": keys})
        assert r["result"]["status"] == "granted", r


@pytest.mark.slow
def test_a_reply_over_the_backlog_limit_is_delivered(daemon: DaemonHandle) -> None:
    """claim.list of 40,000 claims (~20 MB, over BACKLOG_LIMIT) arrives whole; the
    session listing shows 100 claims and the count; ``sessions active`` works."""
    n = 40_000
    with Client(daemon.socket, timeout=60) as c:
        assert "result" in c.call("session.register", {"session_id": "hoarder"})
        hold_many(c, "hoarder", n)
        c.send(b'{"jsonrpc":"2.0","id":"big","method":"claim.list"}\n')
        line = c.line()
        listed = c.call("session.list")["result"]["sessions"]
    cli = subprocess.run(
        [sys.executable, "-m", "meshctl.cli", "sessions", "active"],
        env=daemon.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip

    assert line is not None
    assert len(line) > BACKLOG_LIMIT
    assert len(json.loads(line)["result"]["claims"]) == n
    assert [len(s["claims"]) for s in listed] == [LISTED_CLAIMS]
    assert [s["claims_total"] for s in listed] == [n]
    assert cli.returncode == 0, cli.stderr
    assert "hoarder" in cli.stdout


def test_a_big_reply_does_not_make_a_subscriber_behind(daemon: DaemonHandle) -> None:
    """A subscriber asks for a listing bigger than the event backlog and an event
    arrives before it reads: it gets the whole reply and the event, not dropped."""
    big = "/" + "y" * 4000
    with Client(daemon.socket) as c, Client(daemon.socket) as sub:
        for i in range(150):  # ~1.3 MB of session.list
            assert "result" in c.call(
                "session.register", {"session_id": f"s{i}", "cwd": big, "repo": big}
            )
        assert "result" in sub.call("events.subscribe", {"session_id": "s0"})
        sub.send(b'{"jsonrpc":"2.0","id":"list","method":"session.list"}\n')
        # the reply sits in the daemon's backlog (sub reads nothing yet); now an event
        assert "result" in c.call("message.send", {"session_id": "s1", "to": "s0", "text": "hi"})
        assert "result" in c.call("mesh.ping")  # the event was pushed by now
        got = [sub.reply(), sub.reply()]

    assert CLOSED not in got
    reply = next(m for m in got if m.get("id") == "list")
    event = next(m for m in got if m.get("method") == "event")
    assert len(json.dumps(reply)) > EVENT_BACKLOG_LIMIT
    assert len(reply["result"]["sessions"]) == 150
    assert event["params"]["session_id"] == "s0"
