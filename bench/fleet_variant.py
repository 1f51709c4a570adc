"""meshd with bench-only fleet switches: ``python -m bench.fleet_variant [SWITCH …] run …``.

* ``--one-connection``: the KV watches share the requests' NATS connection (as before
  the link had a watch connection), for an A/B of the two in one run;
* ``--no-watch``: no watch on the claim records at all (waiters are then woken only
  by their periodic look): what the watch's deliveries cost a claim;
* ``--uvloop``: the daemon on uvloop (``MESH_EVENT_LOOP=uvloop``);
* ``--pause-watch``: the watch connection left unread while a claim's or a release's
  own writes are in flight (the asyncio transport under nats-py paused): an experiment
  (docs/bench-runs/2026-12-02-fleet-echo.md);
* ``--no-mirror``: no in-memory mirror of the commit records (listings read NATS);
* ``--steps FILE``: times the daemon's steps of a fleet claim and release (the
  handlers, the fleet's decision, each KV request) with ``time.perf_counter`` and
  writes their durations to ``FILE`` (JSON, seconds) when the daemon exits;
* ``--cprofile FILE``: the daemon's whole run under cProfile, written at exit to
  ``FILE.<pid>``.

Otherwise the real ``meshd`` command line runs. Nothing here is a user setting.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

STEPS: dict[str, list[float]] = {}


def _timed(owner: Any, name: str, label: str) -> None:
    """Replace coroutine method ``owner.name`` by one that records its duration."""
    inner: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(inner)
    async def wrapper(*args: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return await inner(*args, **kw)
        finally:
            STEPS.setdefault(label, []).append(time.perf_counter() - t)

    setattr(owner, name, wrapper)


def _steps(path: str) -> None:
    from nats.aio.client import Client
    from nats.js.kv import KeyValue

    from meshd.domains.claims import ClaimHandlers
    from meshd.fleet import claim_bucket
    from meshd.fleet.claim_release import FleetReleases
    from meshd.fleet.claims import FleetClaims
    from meshd.server.serve import Server
    from meshd.service import Service

    _timed(Server, "_frame", "frame (read to reply written)")
    _timed(Service, "commit", "local commit")
    _timed(ClaimHandlers, "acquire", "handler acquire")
    _timed(ClaimHandlers, "release", "handler release")
    _timed(FleetClaims, "decide", "fleet decide")
    _timed(claim_bucket.Commit, "with_write", "record CAS + commit create (together)")
    _timed(FleetReleases, "release", "fleet release (writes together)")
    _timed(KeyValue, "update", "kv.update")
    _timed(KeyValue, "create", "kv.create")
    _timed(KeyValue, "delete", "kv.delete")
    _timed(Client, "request", "nc.request")

    def dump() -> None:
        with open(path, "w") as f:
            json.dump(STEPS, f)

    atexit.register(dump)


def _one_connection() -> None:
    from nats.aio.client import Client

    from meshd.fleet.link import FleetLink

    connect = FleetLink._connect

    async def _connect(self: FleetLink, which: str) -> Client:
        if which == "watch" and self.nc is not None:
            return self.nc  # the watches on the requests' connection
        return await connect(self, which)

    FleetLink._connect = _connect  # type: ignore[method-assign]


def _no_watch() -> None:
    import anyio

    from meshd.fleet.claim_upkeep import ClaimUpkeep

    async def _watch(self: ClaimUpkeep) -> None:
        await anyio.sleep_forever()

    ClaimUpkeep._watch = _watch  # type: ignore[method-assign]


def _no_mirror() -> None:
    import anyio

    from meshd.fleet.claim_mirror import ClaimMirror

    async def run(self: ClaimMirror) -> None:
        await anyio.sleep_forever()

    ClaimMirror.run = run  # type: ignore[method-assign]


def _pause_watch() -> None:
    """Experiment: the watch connection is not read while this host's own claim or
    release writes are in flight (its deliveries wait in the socket)."""
    from meshd.fleet.claim_release import FleetReleases
    from meshd.fleet.claims import FleetClaims

    busy = [0]

    def transport(link: Any) -> Any:
        nc = link.watch_nc
        t = getattr(getattr(nc, "_transport", None), "_io_writer", None)
        return None if t is None else t.transport

    def wrap(owner: Any, name: str, link_of: Callable[[Any], Any]) -> None:
        inner = getattr(owner, name)

        @functools.wraps(inner)
        async def wrapper(self: Any, *args: Any, **kw: Any) -> Any:
            t = transport(link_of(self))
            if t is not None:
                busy[0] += 1
                t.pause_reading()
            try:
                return await inner(self, *args, **kw)
            finally:
                if t is not None:
                    busy[0] -= 1
                    if not busy[0]:
                        t.resume_reading()

        setattr(owner, name, wrapper)

    wrap(FleetClaims, "decide", lambda s: s.link)
    wrap(FleetReleases, "release", lambda s: s.link)


def _take(args: list[str], flag: str) -> str | None:
    if flag not in args:
        return None
    i = args.index(flag)
    value = args[i + 1]
    del args[i : i + 2]
    return value


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--one-connection" in args:
        args.remove("--one-connection")
        _one_connection()
    if "--no-watch" in args:
        args.remove("--no-watch")
        _no_watch()
    if "--uvloop" in args:
        args.remove("--uvloop")
        os.environ["MESH_EVENT_LOOP"] = "uvloop"
    if "--pause-watch" in args:
        args.remove("--pause-watch")
        _pause_watch()
    if "--no-mirror" in args:
        args.remove("--no-mirror")
        _no_mirror()
    if (path := _take(args, "--steps")) is not None:
        _steps(path)
    prof_path = _take(args, "--cprofile")
    from meshd.cli import main

    sys.argv = ["meshd", *args]
    if prof_path is None:
        main()
    else:
        import cProfile
        import os

        prof = cProfile.Profile()
        atexit.register(lambda: prof.dump_stats(f"{prof_path}.{os.getpid()}"))
        prof.enable()
        main()
