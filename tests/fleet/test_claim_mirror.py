"""The mirror's own bookkeeping (:class:`meshd.fleet.claim_mirror.MirrorView`), without a
server: what a commit record or lease delivered by the watch does to the listings."""

from __future__ import annotations

import json

import pytest

from meshd.fleet import claim_bucket as bucket
from meshd.fleet.claim_mirror import MirrorView

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
