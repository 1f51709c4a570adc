"""The method table and the glue between core, domains, store, process watcher and server.

Each domain (:class:`meshd.domain.Domain`, one module in :mod:`meshd.domains`)
adds its methods with :meth:`Service.add`: plain functions of (params,
connection). The service drives every domain through the same hooks (restore,
drain, sweep, prune, connection closed); ``app.wire`` makes them, each with the
collaborators it uses. Handlers that change
durable state finish with ``await svc.commit()``, which stores what the core
produced before the reply goes out, so nothing is acknowledged before it is on
disk (SPEC §8). Handlers that may wait (queued claims, asks) are marked
``concurrent`` and return a :class:`~meshd.protocol.jsonrpc.Later` for what waits (a
record settled by a callback, or ``Later.running`` for work that waits in a task), so
the connection keeps serving.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import msgspec

from meshd.core.sessions.registry import EndReason, Session
from meshd.core.state import Drained, Event, MeshState, Outcome, Write
from meshd.keys import touched_paths
from meshd.mounts import process_table
from meshd.paths import ProfilePaths
from meshd.pidwatch import PidWatcher
from meshd.protocol import contract
from meshd.protocol import methods as m
from meshd.protocol.errors import MeshError, MethodNotFound
from meshd.protocol.jsonrpc import Handler, encoder, notification
from meshd.resolver import Resolver
from meshd.store import Store

T = TypeVar("T")
HOME = os.path.expanduser("~")
PRUNE_EVERY = 3600.0
"""Seconds between prunes of history older than ``history_days``."""
INLINE_PATHS = 8
"""Paths one request may resolve on the event loop; a request with more resolves them in
the resolver's thread (:meth:`Service.resolve_paths`), so its work on the loop stays
small whatever it sends."""
STALL_AFTER = 2.0
"""Seconds between two sweeper ticks (due every 0.25 s) that mean the daemon was stalled."""
log = logging.getLogger("meshd.service")

rfc3339 = contract.rfc3339
"""The contract's time format, for the handlers that import it from here."""


@dataclass(eq=False)
class Conn:
    """What the service knows of one client connection."""

    id: int
    peer_pid: int | None = None
    subscriptions: set[str] = field(default_factory=set)
    push: Callable[[bytes, Callable[[], None] | None], None] = field(
        default=lambda frame, on_sent=None: None, repr=False
    )
    """Writes one event frame to the client without waiting (set by the server); calls
    its second argument, when given, once the whole frame is written out."""
    leaving: bool = False
    """Its hang-up was read and its waits are being withdrawn (a few a turn): none of
    them is granted meanwhile (set by the server; read by the claim table)."""


class Hooks(Protocol):
    """What the service drives in every domain: :class:`meshd.domain.Domain` is the base
    each domain derives from, which says what these do and implements each as nothing.
    Named here, so the service needs no domain and the domains import the service."""

    def install(self) -> None: ...

    def restore(self, db: sqlite3.Connection) -> None: ...

    def drain(self) -> tuple[list[Write], list[Event]]: ...

    def sweep(self) -> None: ...

    def prune(self, history_days: float) -> None: ...

    def connection_closed(self, conn: Conn) -> None: ...

    def resolve(self, outcomes: list[Outcome], error: BaseException | None) -> None: ...

    def committed(self, writes: list[Write], events: list[Event]) -> None: ...

    async def run(self) -> None: ...

    def forget(self, refused: list[Write]) -> None: ...

    def overrides(self, hook: str) -> bool:
        """Whether this domain implements ``hook`` itself (only those are called)."""
        ...


class Service:
    """Binds the core, the domains, the store and the process watcher behind the method table."""

    def __init__(
        self,
        state: MeshState,
        store: Store,
        paths: ProfilePaths,
        *,
        domains: Callable[[Service], Iterable[Hooks]] = lambda svc: (),
        reload: Callable[[], Awaitable[tuple[bool, str | None]]] | None = None,
    ) -> None:
        self.state = state
        self.store = store
        self.paths = paths
        self.clock = state.clock
        self.started_wall = self.clock.now()
        self.started_mono = self.clock.monotonic()
        self.host = socket.gethostname()
        self.pids = PidWatcher(self.process_died)
        self.resolver = Resolver()
        self.mounts = process_table()
        self.reload_config = reload
        self.connections: dict[int, Conn] = {}
        self.limits: Callable[[], tuple[int, int, int]] | None = None
        """The server's connection limit, open-file limit and reserve (``mesh.info``)."""
        self._deliveries_due = False
        self.subscribers: dict[str, set[Conn]] = {}
        self.handlers: dict[str, Handler] = {}
        self._next_prune = 0.0
        self._last_sweep = self.clock.monotonic()
        self.specs: list[m.MethodSpec] = []
        self.domains: list[Hooks] = list(domains(self))
        """Every domain, made and wired by ``domains`` (``app.wire``), in schema order."""
        for d in self.domains:
            d.install()
        self._outboxes = [d for d in self.domains if d.overrides("drain")]
        self._resolvers = [d for d in self.domains if d.overrides("resolve")]
        self._observers = [d for d in self.domains if d.overrides("committed")]
        self._forgetters = [d for d in self.domains if d.overrides("forget")]
        self.runners = [d for d in self.domains if d.overrides("run")]
        """Domains with long-running work of their own (:meth:`Hooks.run`)."""

    def add(
        self,
        spec: m.MethodSpec,
        fn: Callable[[Any, Conn], Any],
        *,
        is_async: bool = False,
        concurrent: bool = False,
    ) -> None:
        """Serve ``spec.name``: decode params as ``spec.params``, call ``fn(params, conn)``.

        The schema (``mesh.schema``) is generated from the specs added here, so it
        lists exactly what this daemon serves.
        """
        self.handlers[spec.name] = Handler(self._first_decode(spec), fn, is_async, concurrent)
        self.specs.append(spec)

    def _first_decode(self, spec: m.MethodSpec) -> Callable[[bytes], Any]:
        """A decoder that builds the method's real one at its first request.

        Building 56 msgspec decoders (their types' annotations resolved) cost the
        start-up 3-6 ms on the way to the first answer; most daemons never see most
        methods. The first request swaps the real decoder into its handler, so every
        later one calls msgspec directly, as before.
        """

        def decode(raw: bytes) -> Any:
            real = msgspec.json.Decoder(spec.params).decode
            h = self.handlers.get(spec.name)
            if h is not None and h.decode is decode:
                self.handlers[spec.name] = h._replace(decode=real)
            return real(raw)

        return decode

    def holds(self, conn: Conn) -> bool:
        """Whether a connection carries state of its own: a subscription, or a session
        bound to it (``bind: true``). Such a connection is never closed for idling."""
        if conn.subscriptions:
            return True
        sessions = self.state.registry.sessions
        return any(
            (s := sessions.get(sid)) is not None and s.conn_id == conn.id
            for sid in self.state.registry.bound.get(conn.id, ())
        )

    # --- dispatch -----------------------------------------------------------------

    def lookup(self, method: str) -> Handler:
        h = self.handlers.get(method)
        if h is None:
            raise MethodNotFound(f"unknown method {method!r}", {"method": method})
        return h

    def restore(self, db: sqlite3.Connection) -> None:
        """Every domain takes back its durable state, in order (blocking, at start-up)."""
        for d in self.domains:
            d.restore(db)

    def drain(self) -> Drained:
        """What the last calls left to store and tell: the core's and each domain's."""
        d = self.state.drain()
        for dom in self._outboxes:
            writes, events = dom.drain()
            if writes:
                d.writes.extend(writes)
            if events:
                d.events.extend(events)
        return d

    async def resolve_paths(self, raws: Sequence[str], fn: Callable[[], T]) -> T:
        """``fn()``, which makes ``raws`` canonical: in the resolver's thread, with its
        deadline, when resolving one of them may touch a network or FUSE mount (a hung
        mount must not freeze the loop), or when there are more than
        :data:`INLINE_PATHS` of them (a request's work on the loop stays bounded: 1,000
        deep paths that do not exist held it 1.2 s); inline otherwise -- a few paths
        on local disks answer in microseconds, and ``res:X``, ``port:N`` read nothing
        (see meshd.mounts). With no network or FUSE mount at all, a few paths are
        resolved inline: nothing can hang."""
        if len(raws) > INLINE_PATHS:
            return await self.resolver.run(fn, what=f"{len(raws)} paths", paths=len(raws))
        if self.mounts.all_local():
            return fn()
        for raw in raws:
            paths = touched_paths(raw, HOME)
            if paths is None or self.mounts.may_hang(*paths):
                return await self.resolver.run(fn, what=repr(raw[:200]))
        return fn()

    async def commit(self) -> None:
        """Store what the last core calls wrote, then publish and wake waiters; then reply.

        Queued claim requests granted by this change are answered only after the
        grant is committed, like any other acknowledgement.
        """
        d = self.drain()
        if d.writes:
            try:
                await self.store.commit(d.writes, functools.partial(self._settle, d))
            except asyncio.CancelledError:
                raise  # the writes are stored all the same: _settle tells them then
            except BaseException as exc:
                self._settle(d, exc)
                raise
        self._after_commit(d, None)

    def commit_soon(self) -> None:
        """:meth:`commit` without waiting, for work that has no task (a queued claim's
        timeout): the same foreground commit, then published and its waiters told."""
        d = self.drain()
        self.store.commit_soon(d.writes, functools.partial(self._settle, d))

    def _settle(self, d: Drained, error: BaseException | None) -> None:
        """Tell what a commit did: refused, its writes are forgotten (never acknowledged,
        so never there) and its waiters told; else as :meth:`_after_commit`."""
        if error is not None:
            self.state.forget(d.writes)
            for dom in self._forgetters:
                dom.forget(d.writes)
        self._after_commit(d, error)

    async def store_first(
        self,
        writes: list[Write],
        apply: Callable[[], T],
        refused: Callable[[], None] | None = None,
        gone: Callable[[T], None] | None = None,
    ) -> T:
        """Commit ``writes``, *then* ``apply()`` them in memory; return what it returns.

        For changes that cannot be taken back once applied (a freed key is handed on, a
        message acknowledged): a commit the disk refuses changes nothing (``refused()``
        undoes what was set up before, and StorageUnavailable is raised). A caller
        cancelled in the commit (its connection closed) does not take the writes back:
        they land all the same, so ``apply()`` then runs once they did, what it set off
        is stored in the background, and ``gone(applied)`` does without waiting what the
        caller would have done next -- memory never lags the disk.
        """

        def abandoned(error: BaseException | None) -> None:
            try:
                if error is None:
                    applied = apply()
                    self.flush_background()
                    if gone is not None:
                        gone(applied)
                elif refused is not None:
                    refused()
            except Exception:  # the caller is gone: nobody else to tell
                log.exception("applying a commit whose caller went away failed")

        try:
            await self.store.commit(writes, abandoned)
        except MeshError:  # refused: StorageUnavailable
            if refused is not None:
                refused()
            raise
        return apply()

    def flush_background(self) -> None:
        """Queue what background work (sweeps, deaths) wrote; publish once committed."""
        d = self.drain()
        if d.writes:
            self.store.submit(d.writes, on_done=lambda error: self._after_commit(d, error))
        else:
            self._after_commit(d, None)

    def _after_commit(self, d: Drained, error: BaseException | None) -> None:
        """Tell what is now durable; a failed commit tells waiters, not subscribers."""
        if d.events and error is None:
            self.publish(d.events)
        if error is None and (d.writes or d.events):
            self.committed(d.writes, d.events)
        if d.outcomes:
            for dom in self._resolvers:
                dom.resolve(d.outcomes, error)

    def committed(self, writes: list[Write], events: list[Event]) -> None:
        """Tell the domains that watch commits what is durable now (snapshots too)."""
        for dom in self._observers:
            dom.committed(writes, events)

    # --- connections and events -------------------------------------------------------

    def connection_opened(self, conn: Conn) -> None:
        self.connections[conn.id] = conn

    def subscribe(self, conn: Conn, session_id: str) -> None:
        """Push ``session_id``'s events (or a channel's) to ``conn`` until it closes."""
        if conn.id in self.connections:
            conn.subscriptions.add(session_id)
            self.subscribers.setdefault(session_id, set()).add(conn)

    def publish(self, events: list[Event]) -> None:
        """Push each event to the connections subscribed to its session."""
        for ev in events:
            subs = self.subscribers.get(ev.session_id)
            if not subs:
                continue
            frame = encoder.encode(notification("event", ev.body))
            # An event that carries an inbox item (a message, or a claim or preemption
            # notice naming its item) makes it delivered once its frame is out.
            body = ev.body
            on_sent = None
            if getattr(body, "state", None) == "delivered":
                item_id = getattr(body, "id", None)
                if isinstance(item_id, int):
                    on_sent = functools.partial(self._pushed, ev.session_id, item_id)
            for c in list(subs):
                c.push(frame, on_sent)

    def _pushed(self, sid: str, msg_id: int) -> None:
        """An item's push went out in full to a subscriber: it is ``delivered`` now
        (SPEC §6), stored with a commit soon after (one per loop turn, however many)."""
        changed = self.state.mailbox.items.pushed(sid, msg_id, self.clock.now())
        if changed and not self._deliveries_due:
            self._deliveries_due = True
            asyncio.get_running_loop().call_soon(self._store_deliveries)

    def _store_deliveries(self) -> None:
        self._deliveries_due = False
        self.flush_background()

    # --- session lifecycle, whoever triggers it -------------------------------------

    def end_session(self, sid: str, reason: EndReason, *, stored: bool = False) -> Session:
        """End ``sid`` (releasing all it holds) and stop watching its process;
        ``stored``: the end itself is committed already (see :meth:`MeshState.end`)."""
        self.pids.unwatch(sid)
        return self.state.end(sid, reason, stored=stored)

    def process_died(self, sid: str, pid: int) -> None:
        """A watched process exited: end its session at once, unless another anchors it."""
        reg = self.state.registry
        s = reg.sessions.get(sid)
        if s is None:
            return
        if reg.process_gone(sid, pid):
            self.end_session(sid, "died")
        else:
            self.state.writes.append(("session.put", s))
        self.flush_background()

    def connection_closed(self, conn: Conn) -> None:
        self.connections.pop(conn.id, None)
        for sid in conn.subscriptions:
            subs = self.subscribers.get(sid)
            if subs is not None:
                subs.discard(conn)
                if not subs:
                    del self.subscribers[sid]
        self.state.registry.connection_closed(conn.id)
        for d in self.domains:
            d.connection_closed(conn)

    def sweep(self) -> None:
        """Expire what is due; called by the sweeper every tick.

        A tick that comes :data:`STALL_AFTER` late means the daemon did not run (it
        was stopped): heartbeat sessions get grace before anything expires.
        """
        now = self.clock.monotonic()
        gap, self._last_sweep = now - self._last_sweep, now
        if gap > STALL_AFTER:
            n = len(self.state.registry.stalled())
            log.warning(
                "meshd did not run for %.1f s (stopped?); %d heartbeat sessions get %s s of "
                "grace to heartbeat again", gap, n, self.state.settings.stale_after,
            )  # fmt: skip
        for s, _ in self.state.expire_due():
            self.pids.unwatch(s.session_id)
        for d in self.domains:
            d.sweep()
        now = self.clock.monotonic()
        if now >= self._next_prune:  # history_days, checked hourly
            self._next_prune = now + PRUNE_EVERY
            for d in self.domains:
                d.prune(self.state.settings.history_days)
        self.flush_background()
