"""The method table: decode params, drive the core, store, reply.

Every handler is a plain function of (params, connection). Handlers that change
durable state return after :meth:`Service.commit` has stored what the core
produced, so nothing is acknowledged before it is on disk (SPEC §8). Handlers
that may wait (long asks, queued claims) are marked ``concurrent`` and run in a
task of their own so the connection keeps serving.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec

from meshd import PROTOCOL_VERSION, __version__
from meshd.config import as_dict
from meshd.core.registry import Registration, Report, Session
from meshd.core.state import Event, MeshState
from meshd.paths import ProfilePaths
from meshd.pidwatch import PidWatcher, alive, start_time
from meshd.protocol import methods as m
from meshd.protocol.errors import IdInUse, InvalidParams, MeshError, MethodNotFound
from meshd.protocol.jsonrpc import split_path
from meshd.store import Store

CAPABILITIES = ["sessions", "liveness.pidfd", "bind", "schema", "reload"]
_EMPTY = b"{}"


def rfc3339(ts: float) -> str:
    """Wall time as RFC 3339 in UTC, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


@dataclass
class Conn:
    """What the service knows of one client connection."""

    id: int
    peer_pid: int | None = None
    subscriptions: set[str] = field(default_factory=set)


class Handler(NamedTuple):
    decode: Callable[[bytes], Any]
    fn: Callable[[Any, Conn], Any]
    is_async: bool
    concurrent: bool


class Service:
    """Binds the core, the store and the process watcher behind the method table."""

    def __init__(
        self,
        state: MeshState,
        store: Store,
        paths: ProfilePaths,
        *,
        reload: Callable[[], tuple[bool, str | None]] | None = None,
        stats: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        self.state = state
        self.store = store
        self.paths = paths
        self.clock = state.clock
        self.started_wall = self.clock.now()
        self.started_mono = self.clock.monotonic()
        self.host = socket.gethostname()
        self.pids = PidWatcher(self.process_died)
        self._reload = reload
        self._stats = stats or (dict)
        self.publish: Callable[[list[Event]], None] = lambda events: None
        self._schema: dict[str, Any] | None = None
        self.handlers: dict[str, Handler] = {}
        self._add("mesh.ping", m.Empty, self.ping)
        self._add("mesh.info", m.Empty, self.info)
        self._add("mesh.schema", m.Empty, self.schema)
        self._add("mesh.reload", m.Empty, self.reload)
        self._add("session.register", m.RegisterParams, self.register, is_async=True)
        self._add("session.heartbeat", m.HeartbeatParams, self.heartbeat)
        self._add("session.end", m.EndParams, self.end, is_async=True)
        self._add("session.list", m.ListParams, self.list)
        self._add("session.get", m.GetParams, self.get)

    def _add(
        self,
        name: str,
        params: type[m.Params],
        fn: Callable[[Any, Conn], Any],
        *,
        is_async: bool = False,
        concurrent: bool = False,
    ) -> None:
        decode = msgspec.json.Decoder(params).decode
        self.handlers[name] = Handler(decode, fn, is_async, concurrent)

    # --- dispatch -----------------------------------------------------------------

    def lookup(self, method: str) -> Handler:
        h = self.handlers.get(method)
        if h is None:
            raise MethodNotFound(f"unknown method {method!r}", {"method": method})
        return h

    @staticmethod
    def decode_params(h: Handler, raw: bytes | None) -> Any:
        try:
            return h.decode(raw or _EMPTY)
        except msgspec.ValidationError as exc:
            msg, path = split_path(str(exc))
            raise InvalidParams(f"Invalid params: {msg}", {"path": path}) from exc
        except msgspec.DecodeError as exc:  # params were valid JSON as part of the frame
            raise InvalidParams(f"Invalid params: {exc}", {"path": "$"}) from exc

    async def commit(self) -> None:
        """Store what the last core calls wrote, publish their events; then reply."""
        writes, events = self.state.drain()
        if events:
            self.publish(events)
        if writes:
            await self.store.commit(writes)

    def flush_background(self) -> None:
        """Queue what background work (sweeps) wrote, without waiting."""
        writes, events = self.state.drain()
        if events:
            self.publish(events)
        self.store.submit(writes)

    # --- mesh.* -------------------------------------------------------------------

    def ping(self, p: m.Empty, conn: Conn) -> m.PingResult:
        return m.PingResult(time=self.clock.now())

    def info(self, p: m.Empty, conn: Conn) -> m.InfoResult:
        reg = self.state.registry
        now = self.clock.monotonic()
        stats = self._stats()
        return m.InfoResult(
            version=__version__,
            protocol_version=PROTOCOL_VERSION,
            capabilities=CAPABILITIES,
            profile=self.state.profile,
            pid=os.getpid(),
            socket=str(self.paths.socket),
            state_dir=str(self.paths.state),
            started_at=rfc3339(self.started_wall),
            uptime_s=round(now - self.started_mono, 3),
            enabled=self.state.settings.enabled,
            counts=m.Counts(
                sessions=len(reg.sessions),
                stale=sum(1 for s in reg.sessions.values() if reg.is_stale(s, now)),
                connections=stats.get("connections", 0),
            ),
            config=as_dict(self.state.settings),
        )

    def schema(self, p: m.Empty, conn: Conn) -> dict[str, Any]:
        if self._schema is None:
            self._schema = m.method_schema()
        return self._schema

    def reload(self, p: m.Empty, conn: Conn) -> m.ReloadResult:
        if self._reload is None:
            return m.ReloadResult(reloaded=False, error="reload is not available")
        ok, error = self._reload()
        return m.ReloadResult(reloaded=ok, error=error, config=as_dict(self.state.settings))

    # --- session.* ----------------------------------------------------------------

    async def register(self, p: m.RegisterParams, conn: Conn) -> m.RegisterResult:
        st = self.state.settings
        if not st.enabled:
            sid = p.session_id or self.state.registry.new_id(p.source)
            return m.RegisterResult(session_id=sid, disabled=True, liveness=p.liveness)
        pid_start = None
        if p.pid is not None:
            pid_start = start_time(p.pid)
            if pid_start is None:
                raise InvalidParams(f"pid {p.pid} is not running", {"path": "$.pid"})
        r = Registration(
            session_id=p.session_id, source=p.source, task=p.task, status=p.status,
            model=p.model, provider=p.provider, pid=p.pid, pid_start=pid_start,
            host=p.host or self.host, cwd=p.cwd, repo=p.repo, branch=p.branch,
            worktree=p.worktree, tools=p.tools, parent=p.parent, slot=p.slot,
            kanban_task=p.kanban_task, accept_queries=p.accept_queries,
            accept_messages=p.accept_messages, liveness=p.liveness,
            expire_after=p.expire_after, bind=p.bind, conn_id=conn.id,
        )  # fmt: skip
        try:
            s, refreshed = self.state.register(r)
        except IdInUse:
            old = self.state.registry.sessions[p.session_id or ""]
            if old.pid is not None and alive(old.pid, old.pid_start):
                raise
            self._end(old.session_id, "died")
            s, refreshed = self.state.register(r)
        if s.pid is not None:
            self.pids.watch(s.session_id, s.pid, s.pid_start)
        try:
            await self.commit()
        except MeshError:
            if not refreshed:
                self.state.registry.sessions.pop(s.session_id, None)
                self.pids.unwatch(s.session_id)
            raise
        return m.RegisterResult(
            session_id=s.session_id,
            refreshed=refreshed,
            heartbeat_interval=st.heartbeat_interval,
            stale_after=st.stale_after,
            expire_after=s.expire_after or st.expire_after,
            liveness=s.liveness,
        )

    _HB_OK = m.HeartbeatResult()
    _HB_DISABLED = m.HeartbeatResult(disabled=True)

    def heartbeat(self, p: m.HeartbeatParams, conn: Conn) -> m.HeartbeatResult:
        if not self.state.settings.enabled:
            return self._HB_DISABLED
        report = None
        if (
            p.status is not None or p.task is not None or p.cwd is not None
            or p.repo is not None or p.branch is not None or p.worktree is not None
            or p.tools is not None or p.activity is not None
        ):  # fmt: skip
            report = Report(
                status=p.status, task=p.task, cwd=p.cwd, repo=p.repo, branch=p.branch,
                worktree=p.worktree, tools=p.tools, activity=p.activity,
            )  # fmt: skip
        self.state.heartbeat(p.session_id, report)
        return self._HB_OK

    def _end(self, sid: str, reason: Any) -> Session:
        self.pids.unwatch(sid)
        return self.state.end(sid, reason)

    async def end(self, p: m.EndParams, conn: Conn) -> m.EndResult:
        self._end(p.session_id, "ended")
        await self.commit()
        return m.EndResult(session_id=p.session_id, ended=True)

    def process_died(self, sid: str) -> None:
        """A watched process exited: expire its session at once."""
        if sid in self.state.registry.sessions:
            self.state.end(sid, "died")
            self.flush_background()

    def connection_closed(self, conn: Conn) -> None:
        self.state.registry.connection_closed(conn.id)

    def sweep(self) -> None:
        """Expire what is due; called by the sweeper every tick."""
        for s, _ in self.state.expire_due():
            self.pids.unwatch(s.session_id)
        self.flush_background()

    def session_info(self, s: Session, now_mono: float, now_wall: float) -> m.SessionInfo:
        reg = self.state.registry
        return m.SessionInfo(
            session_id=s.session_id, profile=s.profile, source=s.source, status=s.status,
            task=s.task, cwd=s.cwd, repo=s.repo, branch=s.branch, pid=s.pid, host=s.host,
            last_heartbeat=rfc3339(s.last_heartbeat),
            age_s=round(max(0.0, now_wall - s.last_heartbeat), 3),
            stale=reg.is_stale(s, now_mono), liveness=s.liveness, claims=[],
            model=s.model, provider=s.provider, worktree=s.worktree, tools=s.tools,
            parent=s.parent, slot=s.slot, kanban_task=s.kanban_task,
            started_at=rfc3339(s.started_at), last_activity=rfc3339(s.last_activity),
            accept_queries=s.accept_queries, accept_messages=s.accept_messages,
        )  # fmt: skip

    def list(self, p: m.ListParams, conn: Conn) -> m.ListResult:
        st = self.state
        if (
            p.for_profile
            and p.for_profile != st.profile
            and not st.settings.visible_to(p.for_profile)
        ):
            return m.ListResult(profile=st.profile, visible=False)
        now_m, now_w = self.clock.monotonic(), self.clock.now()
        reg = st.registry
        out = [
            self.session_info(s, now_m, now_w)
            for s in reg.sessions.values()
            if not (p.fresh and reg.is_stale(s, now_m))
        ]
        return m.ListResult(profile=st.profile, sessions=out)

    def get(self, p: m.GetParams, conn: Conn) -> m.SessionInfo:
        s = self.state.registry.get(p.session_id)
        return self.session_info(s, self.clock.monotonic(), self.clock.now())


AsyncFn = Callable[[Any, Conn], Awaitable[Any]]
