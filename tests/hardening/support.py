"""Helpers for the hardening tests: raw clients with timeouts, bounded waits, a daemon
started with resource limits.

Everything here talks to the real ``meshd`` subprocess over its real Unix socket; a
helper never pretends to be the server. Every socket has a timeout, so a daemon that
hangs fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import DaemonHandle

TIMEOUT = 10.0
"""Seconds any single socket operation may take before the test calls it a hang."""

CLOSED = "closed"
"""What :meth:`Client.reply` returns when the daemon closed the connection."""


def wait_for(cond: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``cond`` until it returns something true, and return that; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


class Client:
    """One raw connection: bytes out, one JSON value per line back, never blocking forever."""

    def __init__(self, path: Path, timeout: float = TIMEOUT) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(str(path))
        except BaseException:
            self.sock.close()
            raise
        self.buf = b""
        self.ids = 0

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def line(self) -> bytes | None:
        """The next reply line, or ``None`` when the daemon closed the connection."""
        while b"\n" not in self.buf:
            try:
                chunk = self.sock.recv(1 << 20)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def reply(self) -> Any:
        """The next reply, parsed, or :data:`CLOSED`; raises ``TimeoutError`` on a hang."""
        line = self.line()
        return CLOSED if line is None else json.loads(line)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """One request and its reply (the ``result`` or ``error`` member as a dict)."""
        self.ids += 1
        req: dict[str, Any] = {"jsonrpc": "2.0", "id": self.ids, "method": method}
        if params is not None:
            req["params"] = params
        self.send(json.dumps(req).encode() + b"\n")
        return self.reply()


def ping(path: Path, timeout: float = TIMEOUT) -> bool:
    """True when the daemon answers ``mesh.ping`` on a new connection."""
    with Client(path, timeout=timeout) as c:
        r = c.call("mesh.ping")
    return isinstance(r, dict) and r.get("result", {}).get("pong") is True


def session_ids(path: Path) -> set[str]:
    with Client(path) as c:
        r = c.call("session.list")
    return {s["session_id"] for s in r["result"]["sessions"]}


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

    def start(self, *, wait: bool = True) -> None:
        self.log = self.state_dir.parent / f"meshd-{self.profile}.log"
        # The limit is set by a tiny launcher that then execs meshd, rather than by
        # preexec_fn, which is unsafe in a process that has threads.
        launcher = (
            "import os, resource, sys; n = int(sys.argv[1]); "
            "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
            "os.execv(sys.executable, [sys.executable, '-m', 'meshd', *sys.argv[2:]])"
        )
        argv = [sys.executable, "-c", launcher, str(self.nofile),
                "run", "--profile", self.profile, "--log-level", "debug"]  # fmt: skip
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                argv, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
        if wait:
            self.wait_ready()


def raise_own_nofile(n: int) -> None:
    """Lift this test process's soft RLIMIT_NOFILE to ``n`` (or the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n if hard == resource.RLIM_INFINITY else min(n, hard)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
