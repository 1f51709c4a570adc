"""The plugin's link to meshd never raises into Hermes, whatever a daemon sends.

The daemon is the real one; between it and the plugin's :class:`Link` sits a relay on
a Unix socket that passes every frame through, except the reply to one method, which
it replaces with what a broken or hostile daemon might send.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.conftest import DaemonHandle
from tests.support import wait_for

from meshctl.hermes._client import Link

DEEP = 200_000


class Relay:
    """Passes frames between a client and the daemon; answers ``method`` itself."""

    def __init__(self, upstream: Path, path: Path, method: str, reply: bytes) -> None:
        self.upstream, self.method, self.reply = upstream, method, reply
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen()
        self.path = path
        self.open: list[socket.socket] = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            up = socket.socket(socket.AF_UNIX)
            up.connect(str(self.upstream))
            self.open += [client, up]
            for fn, a, b in ((self._down, up, client), (self._up, client, up)):
                self.threads.append(threading.Thread(target=self._pump, args=(fn, a, b)))
                self.threads[-1].start()

    def _pump(self, fn: Callable[[socket.socket, socket.socket], None], a: socket.socket,
              b: socket.socket) -> None:  # fmt: skip
        with contextlib.suppress(OSError, ValueError):
            fn(a, b)

    def _up(self, client: socket.socket, up: socket.socket) -> None:
        with client.makefile("rb") as lines:
            for line in lines:
                req = json.loads(line)
                if req.get("method") == self.method:
                    head = b'{"jsonrpc":"2.0","id":' + json.dumps(req["id"]).encode()
                    client.sendall(head + b',"result":' + self.reply + b"}\n")
                else:
                    up.sendall(line)

    def _down(self, up: socket.socket, client: socket.socket) -> None:
        while chunk := up.recv(65536):
            client.sendall(chunk)

    def close(self) -> None:
        self.server.close()
        for s in self.open:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        for t in self.threads:
            t.join(10)


@pytest.fixture
def deep_relay(daemon: DaemonHandle) -> Iterator[Relay]:
    nested = b"[" * DEEP + b"]" * DEEP
    relay = Relay(daemon.socket, daemon.socket.parent / "relay.sock", "session.list", nested)
    yield relay
    relay.close()


def test_a_reply_nested_too_deep_is_unavailable_not_an_exception(deep_relay: Relay) -> None:
    """200,000 levels deep: the decode's RecursionError used to escape Link.call (and
    would have ended the heartbeat thread of every session of the process)."""
    link = Link("test", str(deep_relay.path), timeout=10)

    assert link.call("mesh.ping") is not None
    got = link.call("session.list")
    paused = link.down
    wait_for(lambda: not link.down, timeout=30, what="the back-off to end")
    again = link.call("mesh.ping")
    link.close()

    assert got is None
    assert paused, "the usual back-off, as for an unreachable daemon"
    assert again is not None, "the next call works, on a new connection"
