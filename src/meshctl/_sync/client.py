"""``Mesh``: the blocking client. Standard library only; never starts or nests an event loop.

Connection: one :class:`~meshctl._blocking.Connection` per :class:`Mesh`, shared by
every thread that calls it: requests are matched to replies by id, so a call that
waits (a queued claim, an ask, a signal wait) does not hold up another thread's call,
even the one that ends the wait. No thread of our own reads: the waiting callers take
turns (see :mod:`meshctl._blocking`). The first exchange on every new connection is
``mesh.info``, whose ``protocol_version`` must have our major version (SPEC §3); its
pid and start time tell one daemon run from the next. The session (``Mesh.session``)
is :class:`meshctl._sync.session.Session`.

Resource handling: the socket opens lazily on the first call and is replaced when
the daemon closed it (a daemon restart shows up as EPIPE on the next send, which is
safe to resend because the daemon never read it). ``close()`` (or leaving the ``with``
block) closes it for good.

Error handling: unreachable daemon -> MeshUnavailable (a sentence says what to do);
no reply in time -> MeshTimeout (that call's reply only is given up: the connection
stays, and other threads' calls on it carry on; its late reply is read and dropped);
the daemon's ``error`` objects -> the class for their ``data.code``. With
``fail_open=True`` an unreachable daemon makes calls return None instead, says so once
through the ``meshctl`` logger (:mod:`meshctl._log` imports logging only when there is
something to say), and reconnects with backoff (0.5 s doubling to 30 s) on later calls.
"""

from __future__ import annotations

import _thread
import os

from meshctl import _conn, _paths
from meshctl._blocking import FORKS, Connection, Stale
from meshctl._core import session as _session
from meshd.protocol.errors import MeshError, MeshTimeout, MeshUnavailable

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from collections import deque
else:  # the same class; collections' __init__ is start-up time on every command
    from _collections import deque
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType
    from typing import Any

    from meshctl._sync.session import Session


class Mesh:
    """A blocking connection to one profile's daemon.

    Args:
        profile: the profile; else ``MESH_PROFILE``; else ``"default"``.
        socket: the socket path; else ``MESH_SOCKET``; else the standard location.
        autostart: start the daemon (detached) when none answers.
        fail_open: when the daemon cannot be reached, return None instead of raising.
        timeout: seconds to wait for each reply.
    """

    def __init__(
        self,
        profile: str | None = None,
        socket: str | os.PathLike[str] | None = None,
        *,
        autostart: bool = True,
        fail_open: bool = False,
        timeout: float = 5.0,
    ) -> None:
        self.profile, self.socket_path = _paths.client_target(profile, socket, autostart)
        self.autostart = autostart
        self.timeout = timeout
        #: (pid, started_at) of the daemon this connection reached; changes on restart.
        self.daemon: tuple[Any, Any] = (None, None)
        # threading.Lock itself, without importing threading (start-up cost): held
        # while (re)connecting, never during a call.
        self._lock = _thread.allocate_lock()
        self._conn: Connection | None = None
        self._closed = False
        #: Events pushed to this Mesh's connections (kept across reconnections).
        self._events: deque[Any] = deque(maxlen=1024)
        self._fail_open = _session.FailOpen(fail_open)

    # --- public surface ----------------------------------------------------------

    @property
    def fail_open(self) -> bool:
        """Whether an unreachable daemon makes calls return None instead of raising."""
        return self._fail_open.enabled

    def call(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """Send one request and return its result (None when failing open: the rule is
        :class:`meshctl._core.session.FailOpen`'s).

        Safe from any number of threads at once; each call waits only for its own reply.
        """
        if self._closed:
            raise MeshError("this Mesh is closed; create a new one")
        policy = self._fail_open
        if policy.skip():
            return None
        try:
            reply = self._exchange(method, params, timeout or self.timeout)
        except (MeshUnavailable, MeshTimeout) as exc:
            policy.failed(exc)  # raises it unless failing open
            return None
        policy.answered(self.profile)
        if reply.error is not None:  # (Reply.unwrap, inline: every call passes here)
            raise reply.error  # the daemon's own error is raised, never failed open
        return reply.result

    def ping(self) -> Any:
        """``mesh.ping``: the cheapest round trip."""
        return self.call("mesh.ping")

    def info(self) -> Any:
        """``mesh.info``: version, protocol, capabilities, counts."""
        info = self.call("mesh.info")
        if info is not None:
            _conn.check_protocol(info, str(self.socket_path or self.profile))
        return info

    def query_cap(self) -> float:
        """The daemon's ``max_query_timeout`` (SPEC §2: the longest any wait runs), from
        the ``mesh.info`` the current connection began with (one is opened if none is);
        60 s when it does not say. A call whose wait defaults to it (``session.resume``)
        waits that long for its reply, plus :attr:`timeout`."""
        conn = self._conn
        info = conn.info if conn is not None and not conn.closed else self.info()
        return _conn.query_cap(info)

    def sessions(self, fresh: bool = False) -> list[dict[str, Any]]:
        """Live sessions of this profile (``fresh``: hide stale ones)."""
        result = self.call("session.list", {"fresh": fresh})
        return [] if result is None else list(result.get("sessions", []))

    def session(
        self,
        task: str = "",
        source: str | None = None,
        session_id: str | None = None,
        liveness: str = "heartbeat",
        bind: bool = False,
        *,
        on_lost: Callable[[str], Any] | None = None,
        heartbeat_interval: float | None = None,
        **fields: Any,
    ) -> Session:
        """A session to use as a context manager: registers on entry, ends on exit.

        ``fields`` are further ``session.register`` params (model, repo, parent …).
        ``heartbeat_interval`` overrides what the daemon advises.
        """
        from meshctl._sync.session import Session  # lazy: sessions load only when used

        core = _session.SessionCore.asked(
            task, source=source, session_id=session_id, liveness=liveness, bind=bind, fields=fields
        )
        return Session(self, core, on_lost=on_lost, heartbeat_interval=heartbeat_interval)

    def _pushed_loss(self, token: int | None, keys: list[str]) -> bool:
        """Whether a claim-loss event for ``token`` naming any of ``keys`` is among the
        events this Mesh's connection kept aside (when something subscribed it)."""
        from meshctl import _events

        return any(
            e.token == token and set(e.resources) & set(keys)
            for e in _events.claim_losses(list(self._events))
        )

    def close(self) -> None:
        """Close the connection; the Mesh cannot be used again. Calls still waiting on
        other threads fail with MeshError."""
        with self._lock:
            self._closed = True
            self._drop()

    def __enter__(self) -> Mesh:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("connected" if self._conn else "idle")
        return f"<Mesh profile={self.profile!r} {state}>"

    # --- connection --------------------------------------------------------------

    def _exchange(self, method: str, params: Any, timeout: float) -> _conn.Reply:
        """One request and its reply; reconnects once if the daemon closed the connection
        before reading the request (it never saw it: resending is safe)."""
        conn = self._conn
        if conn is None or conn.closed or conn.forks != FORKS[0]:
            if conn is not None and conn.forks != FORKS[0]:
                self._forked(conn)
            conn = self._connect(conn)
        try:
            return conn.exchange(method, params, timeout)
        except Stale:
            conn = self._connect(conn)
        try:
            return conn.exchange(method, params, timeout)
        except Stale as again:
            with self._lock:
                if self._conn is conn:
                    self._drop()
            raise _conn.closed_while_sending(again.size) from None

    def _forked(self, conn: Connection) -> None:
        """First call in a forked child: the parent's connection and lock are not ours
        (a parent thread may have held the lock at the fork, and would never release
        it here). Right after a fork the child has one thread, so replacing them is safe."""
        self._lock = _thread.allocate_lock()
        self._fail_open.forked()
        if self._conn is conn:
            self._conn = None
        conn.abandon()

    def _connect(self, old: Connection | None) -> Connection:
        """A usable connection in place of ``old``: the one another thread opened
        meanwhile, else a new one (threads that find the connection gone at once open
        one between them, not one each)."""
        with self._lock:
            if self._closed:
                raise MeshError("this Mesh is closed; create a new one")
            conn = self._conn
            if conn is not None and conn is not old and not conn.closed and conn.forks == FORKS[0]:
                return conn
            self._drop()
            autostart = self._fail_open.may_start(self.autostart)
            conn = Connection(
                self.profile, self.socket_path, autostart=autostart, timeout=self.timeout,
                events=self._events,
            )  # fmt: skip
            self._conn = conn
            self.daemon = conn.daemon
            self._fail_open.reached(self.profile)
            return conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
