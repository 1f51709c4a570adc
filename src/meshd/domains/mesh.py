"""``mesh.*``: liveness, introspection, schema and reload."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from meshd import PROTOCOL_VERSION, __version__
from meshd.config import as_dict
from meshd.domain import Domain
from meshd.protocol import methods as m
from meshd.protocol.contract import rfc3339
from meshd.service import Conn, Service

CAPABILITIES = [
    "sessions", "liveness.pidfd", "bind", "schema", "reload", "claims", "fencing", "audit",
    "messages", "queries", "broadcasts", "handoffs", "events", "board.changed", "notes",
    "jobs",
    "ranks",
    "watch", "preempt",
    "signals", "once", "board",
    "fleet",
]  # fmt: skip


class MeshHandlers(Domain):
    name = "mesh"

    def __init__(self, svc: Service, *, parked: Callable[[], int] = lambda: 0) -> None:
        super().__init__(svc)
        self._schema: dict[str, Any] | None = None
        self._parked = parked
        """How many ``signal.wait`` calls are parked now (the signals domain's count)."""

    def install(self) -> None:
        self.svc.add(m.PING, self.ping)
        self.svc.add(m.INFO, self.info)
        self.svc.add(m.SCHEMA, self.schema)
        self.svc.add(m.RELOAD, self.reload, is_async=True)

    def ping(self, p: m.Empty, conn: Conn) -> m.PingResult:
        return m.PingResult(time=self.svc.clock.now())

    def info(self, p: m.Empty, conn: Conn) -> m.InfoResult:
        svc = self.svc
        st = svc.state
        reg = st.registry
        now = svc.clock.monotonic()
        claim_stats = st.claims.statistics()
        return m.InfoResult(
            version=__version__,
            protocol_version=PROTOCOL_VERSION,
            capabilities=CAPABILITIES,
            profile=st.profile,
            pid=os.getpid(),
            socket=str(svc.paths.socket),
            state_dir=str(svc.paths.state),
            started_at=rfc3339(svc.started_wall),
            uptime_s=round(now - svc.started_mono, 3),
            enabled=st.settings.enabled,
            counts=m.Counts(
                sessions=len(reg.sessions),
                stale=reg.stale_count(now),
                connections=len(svc.connections),
                claims=claim_stats.claims,
                waiters=claim_stats.waiters,
                signal_waits=self._signal_waits(),
            ),
            config=as_dict(st.settings),
            limits=None if svc.limits is None else m.Limits(*svc.limits()),
        )

    def _signal_waits(self) -> int:
        return self._parked()

    def schema(self, p: m.Empty, conn: Conn) -> dict[str, Any]:
        if self._schema is None:
            self._schema = m.method_schema(self.svc.specs)
        return self._schema

    async def reload(self, p: m.Empty, conn: Conn) -> m.ReloadResult:
        path = str(self.svc.paths.config)
        if self.svc.reload_config is None:
            return m.ReloadResult(reloaded=False, error="reload is not available", path=path)
        ok, error = await self.svc.reload_config()
        settings = as_dict(self.svc.state.settings)
        return m.ReloadResult(reloaded=ok, error=error, config=settings, path=path)
