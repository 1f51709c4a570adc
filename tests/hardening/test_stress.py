"""Load with a kill -9 at a random point, checked against the recorded history.

* Sessions: 1,000 sessions heartbeat (in batches) while 50 clients register and end
  sessions; a kill -9 lands at a random point; after the restart every
  acknowledged, never-ended registration is listed and no acknowledged end is undone.
* Claims (when ``claim.acquire`` is served): 50 clients contend for overlapping
  keys for a fixed number of rounds. From the history -- the clients' own
  grant/release times, the fencing tokens, and the daemon's audit log replayed in
  order -- no two exclusive holders of overlapping keys ever overlapped in time;
  every token is new; acknowledged grants never released are still held after the
  kill -9, with their tokens; and tokens after the restart are above every earlier one.

The fast variants run in the default suite; the full-size one is ``slow``.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import DaemonHandle
from tests.hardening.chaos import Churner, History, Messenger, inbox_all, report
from tests.hardening.support import session_ids
from tests.support import Client, wait_for

# --- claims -----------------------------------------------------------------------------


def overlaps(a: str, b: str) -> bool:
    """Canonical keys overlap: equal, or file: paths one under the other."""
    if a == b:
        return True
    if a.startswith("file:") and b.startswith("file:"):
        pa, pb = a[5:], b[5:]
        return pa.startswith(pb + "/") or pb.startswith(pa + "/")
    return False


@dataclass
class Grant:
    session_id: str
    resources: tuple[str, ...]
    token: int
    acked_at: float  # reply received (monotonic, this process)
    release_sent_at: float | None = None
    released: bool = False


@dataclass
class ClaimHistory:
    grants: list[Grant] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    acks: int = 0
    invalid_while_held: list[tuple[str, str, int]] = field(default_factory=list)

    def add(self, g: Grant) -> None:
        with self.lock:
            self.grants.append(g)
            self.acks += 1


class Contender(threading.Thread):
    """One session that, each round, takes 1-2 overlapping keys (waiting), checks its
    fencing token is valid while it holds them, and releases them."""

    def __init__(
        self, path: Path, sid: str, *, keys: list[str], rounds: int, hist: ClaimHistory, seed: int
    ) -> None:
        super().__init__(daemon=True)
        self.path, self.sid, self.keys, self.rounds = path, sid, keys, rounds
        self.hist = hist
        self.rng = random.Random(seed)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Client(self.path, timeout=60) as c:
                r = c.call("session.register", {"session_id": self.sid})
                if r == "closed" or "result" not in r:
                    return
                for _ in range(self.rounds):
                    if not self.round(c):
                        return
        except OSError:
            return  # the daemon was killed: the history holds what was acknowledged
        except BaseException as exc:
            self.error = exc

    def round(self, c: Client) -> bool:
        if self.rng.random() < 0.3:  # a private key, kept: must survive the kill -9
            key = f"res:kept-{self.sid}-{self.rng.randrange(1 << 30)}"
            r = c.call("claim.acquire", {"session_id": self.sid, "resources": [key]})
            if r == "closed":
                return False
            res = r["result"]
            self.hist.add(Grant(self.sid, (res["claims"][0]["resource"],), res["token"],
                                time.monotonic()))  # fmt: skip
        want = self.rng.sample(self.keys, self.rng.choice([1, 1, 2]))
        r = c.call("claim.acquire", {"session_id": self.sid, "resources": want, "wait": 30})
        if r == "closed":
            return False
        res = r["result"]
        if res["status"] != "granted":
            return True  # the wait ran out: allowed, nothing held
        got = tuple(g["resource"] for g in res["claims"])
        g = Grant(self.sid, got, res["token"], time.monotonic())
        self.hist.add(g)
        for key in got:
            v = c.call("claim.validate", {"resource": key, "token": g.token})
            if v == "closed":
                return False
            if not v["result"]["valid"]:
                self.hist.invalid_while_held.append((self.sid, key, g.token))
        g.release_sent_at = time.monotonic()
        r = c.call("claim.release", {"session_id": self.sid, "resources": list(got)})
        if r == "closed":
            return False
        g.released = "result" in r
        return True


def claim_keys(root: Path) -> list[str]:
    return [
        f"file:{root}/tree/a",
        f"file:{root}/tree/a/x",
        f"file:{root}/tree/a/y",
        f"file:{root}/tree/b",
        "port:47011",
        "port:47012",
    ]


def client_overlaps(grants: list[Grant]) -> list[tuple[Grant, Grant]]:
    """Pairs of grants to different sessions, on overlapping keys, held at the same time
    as the clients saw it: [reply received, release sent] is inside the true holding."""
    bad = []
    done = [g for g in grants if g.release_sent_at is not None]
    for i, a in enumerate(done):
        for b in done[i + 1 :]:
            if a.session_id == b.session_id:
                continue
            if not any(overlaps(x, y) for x in a.resources for y in b.resources):
                continue
            assert a.release_sent_at is not None
            assert b.release_sent_at is not None
            if a.acked_at < b.release_sent_at and b.acked_at < a.release_sent_at:
                bad.append((a, b))
    return bad


def audit_overlaps(entries: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    """Replay the audit log in order; every exclusive grant must find no other holder."""
    held: dict[str, dict[str, str]] = {}  # resource -> session -> mode
    bad = []
    for e in entries:
        res, sid, action = e["resource"], e["session_id"], e["action"]
        if action in ("grant", "refresh", "steal"):
            for other_res, holders in held.items():
                if not overlaps(res, other_res):
                    continue
                for other_sid, mode in holders.items():
                    if other_sid != sid and "exclusive" in (mode, e["mode"]):
                        bad.append((e, f"{other_sid} held {other_res}"))
            held.setdefault(res, {})[sid] = e["mode"]
        elif action in ("release", "expire", "lose"):
            held.get(res, {}).pop(sid, None)
    return bad


def run_claims(d: DaemonHandle, clients: int, rounds: int, seed: int) -> dict[str, int]:
    """Contend, kill -9 at a random point, restart, and check the whole history."""
    rng = random.Random(seed)
    keys = claim_keys(d.state_dir)
    hist = ClaimHistory()
    threads = [
        Contender(
            d.socket, f"cl{i}", keys=keys, rounds=rounds, hist=hist, seed=rng.randrange(1 << 30)
        )
        for i in range(clients)
    ]
    for t in threads:
        t.start()
    kill_after = rng.randrange(clients, clients * rounds // 2)
    wait_for(lambda: hist.acks >= kill_after or not any(t.is_alive() for t in threads), 120)
    with Client(d.socket) as c:
        audit = c.call("audit.log", {"limit": 10_000})["result"]["entries"]
    d.kill()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive()
        assert t.error is None, t.error
    d.start()
    with Client(d.socket) as c:
        listed = c.call("claim.list")["result"]["claims"]
        assert "result" in c.call("session.register", {"session_id": "fresh"})
        after = c.call("claim.acquire", {"session_id": "fresh", "resources": ["port:47999"]})
    holding = {(r["session_id"], r["resource"]): r["token"] for r in listed}
    kept = [g for g in hist.grants if g.release_sent_at is None]
    lost = [g for g in kept if any(holding.get((g.session_id, k)) != g.token for k in g.resources)]
    tokens = [g.token for g in hist.grants]

    assert not hist.invalid_while_held, hist.invalid_while_held[:5]
    assert not client_overlaps(hist.grants)
    assert not audit_overlaps(audit), audit_overlaps(audit)[:3]
    assert len(set(tokens)) == len(tokens)
    assert not lost, lost[:5]
    assert after["result"]["token"] > max(tokens, default=0)
    return {
        "grants_acknowledged": len(hist.grants),
        "audit_entries_replayed": len(audit),
        "held_at_kill": len(kept),
        "held_after_restart": len(kept) - len(lost),
        "lost": len(lost),
        "overlaps": 0,
        "max_token_before_kill": max(tokens, default=0),
        "first_token_after_restart": after["result"]["token"],
    }


class TestClaimContention:
    def test_no_two_exclusive_holders_and_nothing_lost(self, daemon: DaemonHandle) -> None:
        """50 clients, 6 rounds each, overlapping keys, kill -9 at a random point."""
        figures = run_claims(daemon, clients=50, rounds=6, seed=7)

        assert figures["grants_acknowledged"] > 0
        report("claims-fast", figures)

    @pytest.mark.slow
    def test_many_rounds(self, daemon: DaemonHandle) -> None:
        """The same, 50 clients for 30 rounds."""
        figures = run_claims(daemon, clients=50, rounds=30, seed=11)

        assert figures["grants_acknowledged"] > 0
        report("claims-long", figures)


# --- sessions under load ------------------------------------------------------------------


def heartbeater(path: Path, sids: list[str], stop: threading.Event, beats: list[int]) -> None:
    """Heartbeat ``sids`` in one batch frame per pass until stopped or the daemon dies."""
    n = 0
    try:
        with Client(path) as c:
            batch = (
                "["
                + ",".join(
                    f'{{"jsonrpc":"2.0","id":{i},"method":"session.heartbeat",'
                    f'"params":{{"session_id":"{sid}"}}}}'
                    for i, sid in enumerate(sids)
                )
                + "]\n"
            ).encode()
            while not stop.is_set():
                c.send(batch)
                if c.reply() == "closed":
                    return
                n += len(sids)
    except OSError:
        return
    finally:
        beats.append(n)


def run_load(d: DaemonHandle, churners: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    # Lift the per-sender message budget (30 a minute) so messengers keep sending.
    Path(d.env["MESH_CONFIG"]).write_text("[defaults]\nmessage_budget_per_minute = 1000000\n")
    assert d.call("mesh.reload")["result"]["reloaded"]
    beating = [f"hb{i}" for i in range(1000)]
    with Client(d.socket) as c:
        for sid in beating:
            assert "result" in c.call("session.register", {"session_id": sid})
    history = History()
    stop = threading.Event()
    beats: list[int] = []
    hbs = [
        threading.Thread(target=heartbeater, args=(d.socket, beating[i::10], stop, beats))
        for i in range(10)
    ]
    chs = [Churner(d.socket, f"ld{i}", history, rng.randrange(1 << 30)) for i in range(churners)]
    inboxes = beating[:10]
    mss = [Messenger(d.socket, f"ms{i}", inboxes, rng.randrange(1 << 30)) for i in range(5)]
    for t in [*hbs, *chs, *mss]:
        t.start()
    target = rng.randrange(200, 3000)
    wait_for(lambda: history.acks >= target, timeout=120)
    d.kill()
    stop.set()
    for t in [*hbs, *chs, *mss]:
        t.join(timeout=30)
        assert not t.is_alive()
    for ch in chs:
        assert ch.error is None, ch.error
    for ms in mss:
        assert ms.error is None, ms.error
    d.start()
    listed = session_ids(d.socket)
    must = history.must_be_listed() | set(beating)
    lost = must - listed
    undone = history.must_not_be_listed() & listed
    sent = {mid: v for m in mss for mid, v in m.acked.items()}
    readable = {sid: inbox_all(d.socket, sid) for sid in inboxes} if mss else {}
    lost_messages = [mid for mid, (to, text) in sent.items() if readable[to].get(mid) != text]

    assert not lost, sorted(lost)[:10]
    assert not undone, sorted(undone)[:10]
    assert not lost_messages, lost_messages[:10]
    return {
        "messages_acknowledged": len(sent),
        "messages_readable_after_restart": len(sent) - len(lost_messages),
        "messages_lost": len(lost_messages),
        "heartbeating_sessions": len(beating),
        "heartbeats_answered": sum(beats),
        "churners": churners,
        "operations_acknowledged": history.operations_acknowledged() + len(beating),
        "must_be_listed": len(must),
        "found_after_restart": len(must & listed),
        "lost": len(lost),
        "ended_but_listed": len(undone),
    }


class TestLoad:
    def test_1000_heartbeating_50_churning_kill9(self, daemon: DaemonHandle) -> None:
        """1,000 sessions heartbeating, 50 clients registering/ending, kill -9 at random."""
        figures = run_load(daemon, churners=50, seed=3)

        assert figures["lost"] == 0
        report("load", figures)

    @pytest.mark.slow
    def test_with_claims_too(self, daemon: DaemonHandle) -> None:
        """Load, then claim contention on the same daemon after its restart."""
        load = run_load(daemon, churners=50, seed=5)
        claims = run_claims(daemon, clients=50, rounds=20, seed=13)

        assert load["lost"] == 0
        assert load["messages_lost"] == 0
        assert claims["grants_acknowledged"] > 0
        assert claims["lost"] == 0
        report("load+claims", {**load, **{f"claims_{k}": v for k, v in claims.items()}})
