"""The lock table's part in fleet-wide claims (SPEC §12), pure: a token issued by the
fleet, a loss the fleet decided, a local-only grant that became fleet-wide."""

from __future__ import annotations

from meshd.core.claims.table import ClaimTable, Granted
from meshd.core.clock import ManualClock
from meshd.keys import from_canonical


def test_a_grant_takes_the_fleets_token_and_leaves_the_counter_alone() -> None:
    t = ClaimTable(ManualClock())
    got = t.acquire("a", [from_canonical("box:x")], token=500)
    assert isinstance(got, Granted)
    assert got.token == 500
    assert [c.token for c in t.list_claims("a")] == [500]
    assert t.validate(from_canonical("box:x"), 500)
    assert t.fencing.last == 0  # the local counter issued nothing
    local = t.acquire("a", [from_canonical("port:1")])
    assert isinstance(local, Granted)
    assert local.token == 1


def test_a_steal_takes_the_fleets_token() -> None:
    t = ClaimTable(ManualClock())
    t.acquire("a", [from_canonical("box:x")], token=5)
    got = t.steal("b", [from_canonical("box:x")], reason="r", token=9)
    assert got.token == 9
    assert [c.session_id for c in got.stolen] == ["a"]


def test_lose_drops_only_the_named_grant_and_tells_the_holder() -> None:
    t = ClaimTable(ManualClock())
    t.acquire("a", [from_canonical("box:x"), from_canonical("box:y")], token=7)
    t.drain()
    assert t.lose("a", [from_canonical("box:x")], 6, how="fleet") == []  # older token
    assert t.lose("a", [from_canonical("box:x")], 7, how="fleet") == ["box:x"]
    assert [c.resource for c in t.list_claims("a")] == ["box:y"]
    out = t.drain()
    assert [(n.kind, n.resources, n.how) for n in out.notices] == [("lost", ("box:x",), "fleet")]
    assert [(r.action, r.resource, r.how) for r in out.audit] == [("lose", "box:x", "fleet")]


def test_retoken_moves_a_local_only_grant_to_the_fleets_token() -> None:
    t = ClaimTable(ManualClock())
    t.acquire("a", [from_canonical("res:r")], ttl=30)
    t.drain()
    assert t.retoken("a", [from_canonical("res:r")], 1, 42, how="fleet") == ["res:r"]
    (claim,) = t.list_claims("a")
    assert (claim.token, claim.ttl) == (42, 30)
    assert t.validate(from_canonical("res:r"), 42)
    assert not t.validate(from_canonical("res:r"), 1)
    out = t.drain()
    assert [(n.kind, n.token) for n in out.notices] == [("granted", 42)]
    assert [(r.action, r.token, r.how) for r in out.audit] == [("grant", 42, "fleet")]
    # its ttl still runs out, under the new token
    t.clock.advance(31)
    assert [(n.resources, n.token) for n in t.expire_ttls()] == [(("res:r",), 42)]
    assert t.list_claims("a") == ()
