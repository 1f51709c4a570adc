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
    client_busy: float = 0.0  # the generator's CPU share: near 1.0 means it is the limit

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
        send[i](frames[i][0])
    # phase 1: one request on every connection, none resent until all are answered
    # (under a closed loop the busy connections would starve the accept loop)
    waiting = set(range(n))
    now = start
    while waiting and now < start + accept_timeout:
        for fd, _ in ep.poll(1.0):
            i = by_fd[fd]
            if b"\n" in recv[i](65536):
                waiting.discard(i)
        now = clock()
    all_answered = now - start
    answered = n - len(waiting)
    for i in range(n):
        step[i] = 1
        sent_at[i] = clock()
        send[i](frames[i][1 % len(frames[i])])
    # phase 2: closed loop; warm up, then count
    t_end = now + warmup + duration
    t_warm = now + warmup
    counted = 0
    cpu0 = 0.0
    while now < t_end:
        for fd, _ in ep.poll(1.0):
            i = by_fd[fd]
            data = recv[i](65536)
            if not data:
                raise ConnectionError(f"server closed connection {i}")
            if b"\n" not in data:
                continue
            t = clock()
            if t >= t_warm:
                if not counted:
                    cpu0 = time.process_time()
                    t_warm = t
                counted += 1
                lat.append(t - sent_at[i])
            step[i] += 1
            f = frames[i]
            sent_at[i] = t
            send[i](f[step[i] % len(f)])
        now = clock()
    busy = (time.process_time() - cpu0) / max(1e-9, now - t_warm)
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
        seconds=now - t_warm,
        p50=pct(lat, 0.5),
        p99=pct(lat, 0.99),
        all_answered=all_answered,
        client_busy=busy,
    )
