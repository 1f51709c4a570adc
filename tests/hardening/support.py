"""Helpers for the hardening tests: a daemon started with resource limits, pings,
listings (the raw client and the bounded wait are :mod:`tests.support`'s).

Everything here talks to the real ``meshd`` subprocess over its real Unix socket; a
helper never pretends to be the server. Every socket has a timeout, so a daemon that
hangs fails the test instead of hanging it.
"""

from __future__ import annotations

import resource
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import DaemonHandle
from tests.support import CLOSED, TIMEOUT, Client, wait_for

__all__ = [  # the shared client and wait are tests.support's; these names stay importable here
    "CLOSED", "Client", "FaultyDaemon", "LimitedDaemon", "held_key", "is_reply", "ping", "raise_own_nofile",
    "session_ids",
    "wait_for",
]  # fmt: skip


def ping(path: Path, timeout: float = TIMEOUT) -> bool:
    """True when the daemon answers ``mesh.ping`` on a new connection."""
    with Client(path, timeout=timeout) as c:
        r = c.call("mesh.ping")
    return isinstance(r, dict) and r.get("result", {}).get("pong") is True


def session_ids(path: Path) -> set[str]:
    with Client(path) as c:
        r = c.call("session.list")
    return {s["session_id"] for s in r["result"]["sessions"]}


def held_key(daemon: DaemonHandle, c: Client, *waiters: str) -> str:
    """A key held by session ``holder``; ``waiters`` registered too."""
    key = f"file:{daemon.state_dir}/k"
    for sid in ("holder", *waiters):
        assert "result" in c.call("session.register", {"session_id": sid})
    assert "result" in c.call("claim.acquire", {"session_id": "holder", "resources": [key]})
    return key


def is_reply(value: Any) -> bool:
    """A well-formed JSON-RPC 2.0 reply object: a result or an error with an int code."""
    if not isinstance(value, dict) or value.get("jsonrpc") != "2.0" or "id" not in value:
        return False
    if "result" in value:
        return "error" not in value
    err = value.get("error")
    return isinstance(err, dict) and isinstance(err.get("code"), int) and "message" in err


@dataclass
class LimitedDaemon(DaemonHandle):
    """A daemon whose RLIMIT_NOFILE (soft and hard) is set before it starts."""

    nofile: int = 64

    def meshd_argv(self) -> list[str]:
        # The limit is set by a tiny launcher that then execs meshd, rather than by
        # preexec_fn, which is unsafe in a process that has threads.
        launcher = (
            "import os, resource, sys; n = int(sys.argv[1]); "
            "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
            "os.execv(sys.executable, [sys.executable, '-m', 'meshd', *sys.argv[2:]])"
        )
        return [sys.executable, "-c", launcher, str(self.nofile)]


_FAULT_LAUNCHER = """
import runpy, sys
exec(sys.argv.pop(1))
sys.argv[0] = "meshd"
runpy.run_module("meshd", run_name="__main__", alter_sys=True)
"""


@dataclass
class FaultyDaemon(DaemonHandle):
    """The real daemon with one fault injected: ``fault`` (Python source) runs in its
    process before meshd starts, and replaces one of its functions by one that raises.

    For the guards no real input is known to reach (a reply that cannot be built, a
    withdrawal that raises): everything else is the real daemon on its real socket."""

    fault: str = ""

    def meshd_argv(self) -> list[str]:
        return [sys.executable, "-c", _FAULT_LAUNCHER, self.fault]


def raise_own_nofile(n: int) -> None:
    """Lift this test process's soft RLIMIT_NOFILE to ``n`` (or the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n if hard == resource.RLIM_INFINITY else min(n, hard)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
