"""One way for a request to wait: it returns a ``Later`` (STYLE.md §3.1).

``conn.detach()`` -- a handler keeping its task while a new reader took over the
connection -- is gone; what waits is a record settled by a callback, or
``Later.running`` for work that waits in a task of its own, withdrawn (the task
cancelled) when the caller hangs up. The behaviour is the waits' own tests'
(claims, asks, broadcasts, signals, jobs, resume, the fleet's)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import meshd
from meshd.protocol.jsonrpc import Later
from meshd.service import Conn

SRC = Path(meshd.__file__).parent


def test_a_connection_has_no_detach() -> None:
    assert not hasattr(Conn(1), "detach")
    sites = [
        f"{p.relative_to(SRC)}:{n}"
        for p in sorted(SRC.rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "conn.detach" in line
    ]
    assert sites == []


def test_a_running_later_answers_with_its_work_and_a_withdrawn_one_cancels_it() -> None:
    async def main() -> tuple[object, bool]:
        done = Later.running(asyncio.sleep(0, result="answer"))
        await done.settled()
        cancelled = False

        async def forever() -> None:
            nonlocal cancelled
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled = True
                raise

        waiting = Later.running(forever())
        await asyncio.sleep(0)
        waiting.cancel()  # its caller hung up
        await asyncio.sleep(0)
        return done.result, cancelled

    assert asyncio.run(main()) == ("answer", True)
