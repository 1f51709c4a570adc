"""What tests share beyond the fixtures: one bounded wait, and the raw clients.

* :func:`wait_for` -- poll a condition to reach (never a timing to assert).
* :func:`reaped` -- a subprocess killed, awaited and its pipes closed however a test ends.
* :class:`Client` -- one raw connection: bytes out, one JSON value per line back.
* :class:`RpcClient` -- one kept JSON-RPC connection: ``call`` gives the result,
  ``raw`` the whole reply; pushed events are kept apart in :attr:`RpcClient.events`.

Every socket has a timeout, so a daemon that hangs fails the test instead of
hanging it. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from meshd.paths import ProfilePaths

TIMEOUT = 30.0
"""Seconds any single socket operation may take before the test calls it a hang
(generous: a loaded CI machine answers late, never this late)."""

CLOSED = "closed"
"""What :meth:`Client.reply` returns when the daemon closed the connection."""


def profile_paths(root: Path, profile: str = "test") -> ProfilePaths:
    """Every path of ``profile`` inside ``root``: for a Service built without a daemon."""
    from meshd.paths import ProfilePaths

    return ProfilePaths(
        profile=profile, socket=root / "s.sock", state=root, database=root / "db",
        lock=root / "lock", socket_record=root / "rec", config=root / "config.toml",
        log=root / "log",
    )  # fmt: skip


PATIENCE = 60.0
"""Seconds a test waits for a condition to come true before it calls it a failure:
generous, since passing tests never wait it out and a loaded CI machine is slow."""


def wait_for(
    cond: Callable[[], Any],
    timeout: float = PATIENCE,
    interval: float = 0.02,
    *,
    what: str | Callable[[], object] = "",
) -> Any:
    """Poll ``cond`` until it returns something true, and return that; fail after ``timeout``.

    ``what`` names the condition in the failure, or is called then to describe what
    was seen instead (a terminal's screen).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            seen = what() if callable(what) else what
            raise AssertionError(f"condition not met within {timeout}s: {seen or cond}")
        time.sleep(interval)


@contextlib.contextmanager
def reaped(proc: subprocess.Popen[Any]) -> Iterator[subprocess.Popen[Any]]:
    """``proc``, killed if still running when the block ends, then awaited and its pipes
    closed, on every path: a failed test leaves no process, pipe or ``ResourceWarning``
    behind for a later test to trip on. (``with Popen(...)`` waits without killing.)"""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):  # stdin's unsent rest: the reader is gone
                    pipe.close()


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


class RpcClient:
    """One kept JSON-RPC connection to a daemon; events kept apart from replies."""

    def __init__(self, d: Any, timeout: float = TIMEOUT) -> None:
        """``d``: a socket path, or anything with a ``socket`` (the daemon fixture)."""
        self.timeout = timeout
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(timeout)
        self.sock.connect(str(getattr(d, "socket", d)))
        self.file = self.sock.makefile("rb")
        self.ids = 0
        self.events: list[dict[str, Any]] = []

    def __enter__(self) -> RpcClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def raw(self, method: str, **params: Any) -> dict[str, Any]:
        """One request; its whole reply (events that arrive first go to :attr:`events`)."""
        self.ids += 1
        rid = self.ids
        req = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        self.sock.sendall(json.dumps(req).encode() + b"\n")
        while True:
            line = self.file.readline()
            assert line, "the daemon closed the connection"
            msg = json.loads(line)
            if msg.get("method") == "event":
                self.events.append(msg["params"])
            elif msg.get("id") == rid:
                return msg  # type: ignore[no-any-return]

    def call(self, method: str, **params: Any) -> Any:
        """One request; its result (an error reply fails the test)."""
        reply = self.raw(method, **params)
        assert "result" in reply, reply
        return reply["result"]

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def as_at_a_terminal(argv: list[str]) -> list[str]:
    """``argv`` run with SIGINT at its default, as a person's shell gives it. A
    background job of a non-interactive shell (``cmd &`` in a script, as a CI runner may
    start the suite) inherits SIGINT *ignored*, and Python started so installs no
    KeyboardInterrupt handler: the child would rightly ignore a test's SIGINT. A
    disposition set to default survives ``exec``."""
    import sys

    reset = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    return [sys.executable, "-c", reset, *argv]
