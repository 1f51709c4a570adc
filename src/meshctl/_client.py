"""``Mesh``: the blocking client. Standard library only; never starts or nests an event loop.

Connection: one Unix socket per :class:`Mesh`, guarded by a lock, so a plain call from
any thread sends its request and reads its reply on that thread. The first exchange
on every new connection is ``mesh.info``, whose ``protocol_version`` must have our major
version (SPEC §3); its pid and start time tell one daemon run from the next.

Resource handling: the socket opens lazily on the first call and is replaced when
the daemon closed it (a daemon restart shows up as EPIPE on the next send, which is
safe to resend because the daemon never read it). ``close()`` (or leaving the ``with``
block) closes it for good.

Error handling: unreachable daemon -> MeshUnavailable (a sentence says what to do);
no reply in time -> MeshTimeout (the connection is dropped, so a late reply cannot be
mistaken for the next one); the daemon's ``error`` objects -> the class for their
``data.code``. With ``fail_open=True`` an unreachable daemon makes calls return None
instead, says so once through the ``meshctl`` logger (:mod:`meshctl._log` imports
logging only when there is something to say), and reconnects with backoff (0.5 s
doubling to 30 s) on later calls.

This module holds the connection alone, so that a one-shot ``meshctl`` command
loads it without the sessions, messaging and shared-work helpers of
:mod:`meshctl._sync` (which re-exports :class:`Mesh`; ``meshctl.Mesh`` is this class).
"""

from __future__ import annotations

import _thread
import os
import socket as _socket
import time
from collections import deque

from meshctl import _conn, _paths, _spawn
from meshctl import _log as log
from meshd.protocol import contract
from meshd.protocol.errors import (
    FrameTooLarge,
    MeshError,
    MeshTimeout,
    MeshUnavailable,
)

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType
    from typing import Any

    from meshctl._sync import Session

_BIG_SEND = 64 << 10
_BACKOFF_FIRST = 0.5
_BACKOFF_MAX = 30.0


class _Stale(Exception):
    """The daemon had closed the connection before we sent (restart): resend once."""


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
        self.profile = contract.check_profile(
            profile or os.environ.get("MESH_PROFILE") or "default"
        )
        self.socket_path = _paths.socket_arg(socket)
        self.autostart = autostart
        self.fail_open = fail_open
        self.timeout = timeout
        #: (pid, started_at) of the daemon this connection reached; changes on restart.
        self.daemon: tuple[Any, Any] = (None, None)
        # threading.Lock itself, without importing threading (start-up cost)
        self._lock = _thread.allocate_lock()
        self._sock: _socket.socket | None = None
        self._proto = _conn.Protocol()
        self._owner_pid = 0
        self._closed = False
        self._events: deque[Any] = deque(maxlen=1024)
        self._degraded = False
        self._retry_at = 0.0
        self._backoff = _BACKOFF_FIRST

    # --- public surface ----------------------------------------------------------

    def call(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """Send one request and return its result (None when failing open)."""
        with self._lock:
            if self._closed:
                raise MeshError("this Mesh is closed; create a new one")
            if self._degraded and time.monotonic() < self._retry_at:
                return None
            try:
                reply = self._exchange(method, params, timeout or self.timeout)
            except (MeshUnavailable, MeshTimeout) as exc:
                # A hung daemon (no reply in time) is as unavailable as a missing one.
                if not self.fail_open:
                    raise
                self._degrade(exc)
                return None
        return reply.unwrap()

    def ping(self) -> Any:
        """``mesh.ping``: the cheapest round trip."""
        return self.call("mesh.ping")

    def info(self) -> Any:
        """``mesh.info``: version, protocol, capabilities, counts."""
        info = self.call("mesh.info")
        if info is not None:
            _conn.check_protocol(info, str(self.socket_path or self.profile))
        return info

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
        from meshctl import _session
        from meshctl._sync import Session

        if source is not None:
            fields["source"] = source
        core = _session.SessionCore(
            task=task, session_id=session_id, liveness=liveness, bind=bind, fields=fields
        )
        return Session(self, core, on_lost=on_lost, heartbeat_interval=heartbeat_interval)

    def close(self) -> None:
        """Close the connection; the Mesh cannot be used again."""
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
        state = "closed" if self._closed else ("connected" if self._sock else "idle")
        return f"<Mesh profile={self.profile!r} {state}>"

    # --- connection --------------------------------------------------------------

    def _exchange(self, method: str, params: Any, timeout: float) -> _conn.Reply:
        """One request and its reply; reconnects once if the daemon closed the connection."""
        if self._sock is None or self._owner_pid != os.getpid():
            self._connect()
        rid, frame = self._proto.request(method, params)
        try:
            self._send(frame)
        except _Stale:
            self._connect()
            rid, frame = self._proto.request(method, params)
            try:
                self._send(frame)
            except _Stale:
                raise self._closed_while_sending(len(frame)) from None
        return self._read(rid, timeout)

    def _connect(self) -> None:
        self._drop()
        autostart = self.autostart and not self._degraded
        sock = _spawn.connect_or_start(self.profile, self.socket_path, autostart, self.timeout)
        self._sock = sock
        self._owner_pid = os.getpid()
        try:
            rid, frame = self._proto.request("mesh.info")
            self._send(frame)
            info = self._read(rid, self.timeout).unwrap()
            where = _spawn.find_socket_str(self.profile, self.socket_path)
            _conn.check_daemon(info, where, self.profile)
        except _Stale:
            self._drop()
            raise MeshUnavailable(
                "meshd closed the connection at once; check `meshctl daemon status`"
            ) from None
        except BaseException:
            self._drop()
            raise
        self.daemon = _conn.daemon_key(info)
        if self._degraded:
            log.warning("Session Mesh is reachable again (profile %s)", self.profile)
            self._degraded = False
            self._backoff = _BACKOFF_FIRST

    def _send(self, frame: bytes) -> None:
        sock = self._sock
        assert sock is not None
        try:
            sock.sendall(frame)
        except (BrokenPipeError, ConnectionResetError):
            refusal = self._refusal()
            self._drop()
            if refusal is not None:
                raise FrameTooLarge(
                    f"meshd refused a {len(frame)}-byte request: {refusal.message}; "
                    "send less per call",
                    refusal.data,
                ) from None
            raise _Stale from None
        except TimeoutError:
            self._drop()
            raise MeshTimeout(f"meshd did not read a request within {self.timeout} s") from None
        except OSError as exc:
            self._drop()
            raise MeshUnavailable(f"lost the connection to meshd: {exc}; retry") from exc

    def _refusal(self) -> MeshError | None:
        """After a failed send: the -32600 the daemon may have sent before closing."""
        sock = self._sock
        if sock is None:
            return None
        try:
            sock.settimeout(0.05)
            while (msg := self._proto.next_message()) is None:
                data = sock.recv(65536)
                if not data:
                    return None
                self._proto.feed(data)
        except (OSError, MeshError):
            return None
        if isinstance(msg, _conn.Reply) and msg.error is not None and msg.error.code == -32600:
            return msg.error
        return None

    def _closed_while_sending(self, size: int) -> MeshError:
        if size > _BIG_SEND:
            return FrameTooLarge(
                f"meshd closed the connection while a {size}-byte request was being sent; "
                "requests are limited to 1 MiB: send less per call"
            )
        return MeshUnavailable(
            "meshd closed the connection twice in a row; check `meshctl daemon status` "
            "and its log in the state folder"
        )

    def _read(self, rid: int, timeout: float) -> _conn.Reply:
        """Read until the reply to ``rid``; events seen meanwhile are kept aside."""
        sock = self._sock
        assert sock is not None
        proto = self._proto
        deadline = time.monotonic() + timeout
        msg = proto.next_message()
        while True:
            if msg is None:
                try:
                    sock.settimeout(max(deadline - time.monotonic(), 1e-6))
                    data = sock.recv(65536)
                except TimeoutError:
                    self._drop()
                    raise MeshTimeout(f"no reply from meshd within {timeout} s") from None
                except OSError as exc:
                    self._drop()
                    raise MeshUnavailable(f"lost the connection to meshd: {exc}; retry") from exc
                if not data:
                    self._drop()
                    raise MeshUnavailable(_conn.closed_before_reply(proto.partial))
                msg = proto.take(data)
                continue
            if isinstance(msg, _conn.Event):
                self._events.append(msg.params)
            elif msg.id == rid or msg.id is None:
                return msg
            msg = proto.next_message()

    def _drop(self) -> None:
        if self._sock is not None:
            # In a forked child this closes only the child's copy: the parent keeps its link.
            self._sock.close()
            self._sock = None
        self._proto.clear()

    def _degrade(self, exc: MeshError) -> None:
        """Fail open: say so once, then retry with backoff on later calls."""
        if not self._degraded:
            log.warning(
                "Session Mesh is unreachable, continuing without it (fail_open): %s",
                exc.message,
            )
            self._degraded = True
            self._backoff = _BACKOFF_FIRST
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, _BACKOFF_MAX)
