"""The mirror's own bookkeeping (:class:`meshd.fleet.claim_mirror.MirrorView`), without a
server: what a commit record or lease delivered by the watch does to the listings."""

from __future__ import annotations

import json
import time

import pytest

from meshd.core.settings import FleetSettings
from meshd.fleet import claim_bucket as bucket
from meshd.fleet.claim_mirror import ClaimMirror, MirrorView
from meshd.fleet.claim_records import set_value
from meshd.fleet.link import FleetLink
from meshd.keys import from_canonical

TTL = 15.0


def record(keys: object, *, host: str = "h2", session: str = "s2") -> bytes:
    return json.dumps({"s": session, "o": host, "m": "exclusive", "k": keys}).encode()


def fed(*commits: tuple[str, bytes]) -> MirrorView:
    view = MirrorView()
    view.apply(bucket.lease_key("h2"), b"", 1, False, ttl=TTL, stamp=0.0, now=100.0)
    for i, (gid, value) in enumerate(commits, start=2):
        view.apply(f"g.{gid}", value, i, False, ttl=TTL, stamp=0.0, now=100.0)
    return view


def test_a_commit_record_of_a_live_host_is_held() -> None:
    view = fed(("a", record(["res:gpu"])))

    held = view.held("h1", None, 101.0)

    assert [(h.resource, h.host, h.session_id) for h in held] == [("res:gpu", "h2", "s2")]


@pytest.mark.parametrize(
    "value",
    [b"[]", b'"text"', b"5", b"null", record(5), record("res:gpu"), record({"a": 1}), b"{"],
    ids=["list", "string", "number", "null", "keys-number", "keys-string", "keys-object", "json"],
)
def test_a_malformed_commit_record_holds_nothing_and_raises_nothing(value: bytes) -> None:
    """A record that is not an object of keys (another writer, a damaged bucket) holds
    nothing, and replaces what that id held before. Raising there stopped the watch's
    callback on the record: a mirror whose catch-up ended on it never became current."""
    view = fed(("a", record(["res:gpu"])), ("b", record(["box:other"])))

    view.apply("g.a", value, 9, False, ttl=TTL, stamp=0.0, now=100.0)

    assert [h.resource for h in view.held("h1", None, 101.0)] == ["box:other"]


@pytest.mark.parametrize(
    ("extra", "reason"),
    [({"r": "big run"}, "big run"), ({}, ""), ({"r": 5}, ""), ({"r": "x" * 300}, "x" * 200)],
    ids=["reason", "before-reasons", "not-text", "too-long"],
)
def test_a_commit_record_carries_its_reason(extra: dict[str, object], reason: str) -> None:
    """The reason a set was claimed for is in its commit record (``r``), and the
    listings report it; a record written by a host of a release before reasons were
    carried has none, and reads as no reason (not as nothing held)."""
    doc = {"s": "s2", "o": "h2", "m": "exclusive", "k": ["res:gpu"], **extra}
    view = fed(("a", json.dumps(doc).encode()))

    held = view.held("h1", None, 101.0)

    assert [(h.resource, h.reason) for h in held] == [("res:gpu", reason)]


def test_the_reason_is_written_in_the_commit_record_only_when_there_is_one() -> None:
    key = from_canonical("res:gpu")
    assert json.loads(set_value([key], "s", "h1", "exclusive", "big run"))["r"] == "big run"
    assert "r" not in json.loads(set_value([key], "s", "h1", "exclusive"))
    assert len(json.loads(set_value([key], "s", "h1", "exclusive", "y" * 500))["r"]) == 200


def h2_holding(stamp: float, ttl: float, now: float) -> MirrorView:
    """A view with h2 holding ``res:gpu``, its lease stored at ``stamp`` (server time)
    and delivered here at ``now`` (this host's monotonic clock)."""
    view = MirrorView()
    view.apply(bucket.lease_key("h2"), b"", 7, False, ttl=ttl, stamp=stamp, now=now)
    view.apply("g.a", record(["res:gpu"]), 5, False, ttl=TTL, stamp=stamp - 1, now=now)
    return view


def test_a_lease_delivered_late_counts_for_its_ttl_from_when_the_server_stored_it() -> None:
    """h2 stopped renewing: its last renewal (TTL 3) was stored at server time 1000 and
    reaches this host (a catch-up) at 2.5 s old; this host's own renewal, stored at
    1002.5, arrives at once. At 0.6 s later the server's clock reads 1003.1: h2's lease
    has run out and its claim is listed no more. Before, the lease counted 3 s from
    its arrival here: h2 was listed up to twice its TTL after its last renewal."""
    view = h2_holding(1000.0, 3.0, now=50.0)
    view.apply(bucket.lease_key("h1"), b"", 9, False, ttl=3.0, stamp=1002.5, now=50.0)

    assert [h.host for h in view.held("h1", None, 50.4)] == ["h2"]  # server: 1002.9
    assert view.held("h1", None, 50.6) == []  # server: 1003.1


def test_a_lease_counts_no_longer_than_its_ttl_from_its_arrival() -> None:
    """The server's time as this view tells it lags when the newest delivery came late;
    a lease still counts no longer than its TTL from its arrival here (as before)."""
    view = h2_holding(1000.0, 3.0, now=50.0)
    view.apply("g.late", record(["box:x"], host="h3"), 8, False, ttl=TTL, stamp=1001.0, now=52.5)

    assert [h.resource for h in view.held("h1", None, 52.9)] == ["res:gpu"]
    assert view.held("h1", None, 53.1) == []  # the server's clock would say 1001.6


def test_a_lease_without_a_server_time_counts_from_its_arrival() -> None:
    view = h2_holding(0.0, 3.0, now=50.0)

    assert [h.host for h in view.held("h1", None, 52.9)] == ["h2"]
    assert view.held("h1", None, 53.1) == []


def test_a_feed_that_stopped_freezes_its_leases_at_its_last_delivery() -> None:
    """The feed's last delivery came at 50.0 (h2's renewal, TTL 3); the link was noticed
    down at 53.5 (pings unanswered for a few seconds): the last known view lists h2's
    claim, as it was when the feed fell silent. Frozen when the loss was noticed, h2's
    lease had run out in the view meanwhile and a cut host listed nothing (seen under
    load in tests/fleet/test_listings.py)."""
    mirror = ClaimMirror(FleetLink(FleetSettings(urls=("nats://127.0.0.1:4222",), name="h1"), "t"))
    mirror.view = h2_holding(1000.0, 3.0, now=50.0)
    mirror.live, mirror.heard = True, 50.0

    mirror.feed_stopped(53.5)

    assert mirror.status()["state"] == "last known"
    assert [(h.host, h.resource) for h in mirror.held() or []] == [("h2", "res:gpu")]


def test_this_hosts_own_commit_leaves_the_views_server_clock_alone() -> None:
    """This host's wall clock is 100 s ahead of the server's. Its own commit record,
    put in the view when made (stamped with this host's time), does not move the
    view's reading of the server's clock: h2's lease, renewed just now on the server's
    clock, still counts. Taken for the server's time, it ran every lease out at once."""
    mirror = ClaimMirror(FleetLink(FleetSettings(urls=("nats://127.0.0.1:4222",), name="h1"), "t"))
    mirror.view = h2_holding(time.time() - 100.0, 3.0, now=time.monotonic())
    mirror.live = True

    mirror.own_commit("g.mine", record(["box:mine"], host="h1", session="s1"), 12)

    assert [(h.host, h.resource) for h in mirror.held() or []] == [("h2", "res:gpu")]
