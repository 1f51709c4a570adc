"""A closed-loop load generator: N kept connections, one request outstanding on each.

One process, one ``epoll`` loop, no threads, so the generator costs the same
whichever server it drives (the echo floor, Redis, or meshd): what differs
between rows is the server. Each connection cycles through its own list of
frames (a heartbeat; or register, end, register, end … for durable writes).
Replies are counted by newline, which also frames Redis's one-line RESP replies.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

from bench.common import pct


@dataclass
class LoadResult:
    connections: int
    answered: int  # connections that got at least one reply
    requests: int
    seconds: float
    p50: float
    p99: float
    all_answered: float = 0.0  # seconds until every connection had a reply

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def connect_all(path: str, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        socks.append(s)
    return socks


def drive(
    path: str,
    frames: Sequence[Sequence[bytes]],
    duration: float,
    *,
    warmup: float = 0.2,
    socks: list[socket.socket] | None = None,
    accept_timeout: float = 60.0,
) -> LoadResult:
    """Drive ``len(frames)`` connections: warm up until every connection has been
    answered (and at least ``warmup`` s), then count for ``duration`` seconds."""
    n = len(frames)
    own = socks is None
    socks = socks if socks is not None else connect_all(path, n)
    ep = select.epoll(n + 1)
    clock = time.perf_counter
    sent_at = [0.0] * n
    step = [0] * n
    by_fd: dict[int, int] = {}
    recv = [s.recv for s in socks]
    send = [s.send for s in socks]
    lat: list[float] = []
    for i, s in enumerate(socks):
        s.setblocking(False)
        by_fd[s.fileno()] = i
        ep.register(s.fileno(), select.EPOLLIN)
    start = clock()
    for i in range(n):
        sent_at[i] = clock()
        send[i](frames[i][0])
    # warm-up: until every connection was answered once (all accepted and served)
    waiting = set(range(n))
    t_min = start + warmup
    now = start
    while (waiting or now < t_min) and now < start + accept_timeout:
        for fd, _ in ep.poll(1.0):
            i = by_fd[fd]
            data = recv[i](65536)
            if not data:
                raise ConnectionError(f"server closed connection {i}")
            if b"\n" not in data:
                continue
            waiting.discard(i)
            step[i] += 1
            f = frames[i]
            sent_at[i] = clock()
            send[i](f[step[i] % len(f)])
        now = clock()
    all_answered = now - start
    answered = n - len(waiting)
    t_end = now + duration
    counted = 0
    while now < t_end:
        for fd, _ in ep.poll(1.0):
            i = by_fd[fd]
            data = recv[i](65536)
            if not data:
                raise ConnectionError(f"server closed connection {i}")
            if b"\n" not in data:
                continue
            t = clock()
            counted += 1
            lat.append(t - sent_at[i])
            step[i] += 1
            f = frames[i]
            sent_at[i] = t
            send[i](f[step[i] % len(f)])
        now = clock()
    # drain the outstanding replies so the connections stay usable
    pending = set(range(n))
    deadline = clock() + 10.0
    while pending and clock() < deadline:
        for fd, _ in ep.poll(1.0):
            i = by_fd[fd]
            if b"\n" in recv[i](65536):
                pending.discard(i)
    ep.close()
    for s in socks:
        s.setblocking(True)
        if own:
            s.close()
    return LoadResult(
        connections=n,
        answered=answered,
        requests=counted,
        seconds=duration,
        p50=pct(lat, 0.5),
        p99=pct(lat, 0.99),
        all_answered=all_answered,
    )
