"""The blocking client's one connection: a Unix socket, the wire, and the events kept aside.

:class:`Connection` is the only place the blocking client reads a socket. ``Mesh``
holds one for plain calls (and replaces it when the daemon closed it, or in a forked
child); a connection of its own serves pushed events -- ``meshctl inbox --follow``,
``meshctl top``, a live responder (``on_query``), ``on_preempt``, the Hermes plugin --
so replies to plain calls and pushed events never share a socket.

The first exchange on every connection is ``mesh.info``: the protocol major version
must be ours and the daemon must serve the profile asked for (SPEC §3); its pid and
start time (:attr:`Connection.daemon`) tell one daemon run from the next.

Standard library only.
"""

from __future__ import annotations

import os
import socket as _socket
import time
from collections import deque

from meshctl import _conn, _spawn
from meshd.protocol.errors import FrameTooLarge, MeshError, MeshTimeout, MeshUnavailable

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from types import TracebackType
    from typing import Any

    from meshctl._sync import Mesh


class Stale(Exception):
    """The daemon had closed the connection before we sent (a restart, an idle close):
    it never read the request, so sending it again on a new connection is safe."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class Connection:
    """One connection to the daemon: requests and their replies on the calling thread,
    pushed events kept aside (:attr:`events`) for :meth:`next_event`.

    Opening connects (starting the daemon when ``autostart`` allows) and checks
    ``mesh.info``. Any failure closes the connection (:attr:`closed`); the caller
    opens a new one. Not thread-safe: one thread at a time (``Mesh`` holds a lock).
    """

    def __init__(
        self,
        profile: str,
        socket_path: Any = None,
        *,
        autostart: bool = True,
        timeout: float = 5.0,
        events: deque[Any] | None = None,
    ) -> None:
        self.timeout = timeout
        #: Events that arrived while a reply was awaited, oldest first.
        self.events: deque[Any] = deque() if events is None else events
        #: The process that opened it: a forked child must open its own.
        self.pid = os.getpid()
        self._proto = _conn.Protocol()
        self._sock: _socket.socket | None = _spawn.connect_or_start(
            profile, socket_path, autostart, timeout
        )
        try:
            info = self.exchange("mesh.info", None, timeout).unwrap()
            _conn.check_daemon(info, _spawn.find_socket_str(profile, socket_path), profile)
        except Stale:
            self.close()
            raise MeshUnavailable(
                "meshd closed the connection at once; check `meshctl daemon status`"
            ) from None
        except BaseException:
            self.close()
            raise
        self.info: Any = info
        #: (pid, started_at) of the daemon it reached.
        self.daemon = _conn.daemon_key(info)

    @classmethod
    def like(cls, mesh: Mesh) -> Connection:
        """A connection of its own to the same daemon as ``mesh``."""
        return cls(mesh.profile, mesh.socket_path, autostart=mesh.autostart, timeout=mesh.timeout)

    @property
    def closed(self) -> bool:
        return self._sock is None

    # --- requests -------------------------------------------------------------------

    def call(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """One request and its result (the daemon's error raised)."""
        try:
            return self.exchange(method, params, timeout or self.timeout).unwrap()
        except Stale:
            raise MeshUnavailable(
                "meshd closed the connection (stopped or restarted); retry"
            ) from None

    def exchange(self, method: str, params: Any, timeout: float) -> _conn.Reply:
        """Send one request and read until its reply; events meanwhile are kept aside.

        Raises :class:`Stale` when the daemon had closed the connection before the
        request went out; MeshTimeout when no reply came in time (the connection is
        closed, so a late reply cannot be taken for the next one's).
        """
        rid, frame = self._proto.request(method, params)
        self._send(frame)
        deadline = time.monotonic() + timeout
        while True:
            msg = self._receive(deadline)
            if msg is None:
                self.close()
                raise MeshTimeout(f"no reply from meshd within {timeout} s")
            if isinstance(msg, _conn.Event):
                self.events.append(msg.params)
            elif msg.id == rid or msg.id is None:
                return msg

    def next_event(self, timeout: float) -> dict[str, Any] | None:
        """The next pushed event, or None when none came within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            while self.events:
                event = self.events.popleft()
                if isinstance(event, dict):
                    return event
            msg = self._receive(deadline)
            if msg is None:
                return None
            if isinstance(msg, _conn.Event):
                self.events.append(msg.params)

    # --- the socket -------------------------------------------------------------------

    def _socket(self) -> _socket.socket:
        if self._sock is None:
            raise MeshUnavailable("this connection to meshd is closed")
        return self._sock

    def _send(self, frame: bytes) -> None:
        sock = self._socket()
        try:
            sock.sendall(frame)
        except (BrokenPipeError, ConnectionResetError):
            refusal = self._refusal()
            self.close()
            if refusal is not None:
                raise FrameTooLarge(
                    f"meshd refused a {len(frame)}-byte request: {refusal.message}; "
                    "send less per call",
                    refusal.data,
                ) from None
            raise Stale(len(frame)) from None
        except TimeoutError:
            self.close()
            raise MeshTimeout(f"meshd did not read a request within {self.timeout} s") from None
        except OSError as exc:
            self.close()
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

    def _receive(self, deadline: float) -> _conn.Reply | _conn.Event | None:
        """The next message, or None at the deadline; MeshUnavailable when the daemon left."""
        proto = self._proto
        msg = proto.next_message()
        while msg is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            sock = self._socket()
            try:
                sock.settimeout(left)
                data = sock.recv(65536)
            except TimeoutError:
                return None
            except OSError as exc:
                self.close()
                raise MeshUnavailable(f"lost the connection to meshd: {exc}; retry") from exc
            if not data:
                partial = proto.partial
                self.close()
                raise MeshUnavailable(_conn.closed_before_reply(partial))
            msg = proto.take(data)
        return msg

    def close(self) -> None:
        """Close the connection (the daemon forgets its subscriptions). Idempotent.

        In a forked child this closes only the child's copy of the socket (no
        ``shutdown``): the parent keeps its connection.
        """
        sock, self._sock = self._sock, None
        if sock is not None:
            if self.pid == os.getpid():
                self._shutdown(sock)
            sock.close()
        self._proto.clear()

    @staticmethod
    def _shutdown(sock: Any) -> None:
        """Shut both directions down; a socket the peer already dropped is fine.
        (Not contextlib.suppress: contextlib costs start-up time on every command.)"""
        try:
            sock.shutdown(_socket.SHUT_RDWR)
        except OSError:
            return

    def __enter__(self) -> Connection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
