"""The blocking client's connection: a Unix socket, the wire, and the events kept aside.

:class:`Connection` is the only place the blocking client reads a socket. ``Mesh``
holds one for plain calls (and replaces it when the daemon closed it, or in a forked
child); a connection of its own serves pushed events -- ``meshctl inbox --follow``,
``meshctl top``, a live responder (``on_query``), ``on_preempt``, the Hermes plugin --
so replies to plain calls and pushed events never share a socket.

Threads share a connection without waiting on each other's calls. The daemon serves
a connection's requests concurrently and answers a waiting one (a queued claim, an
ask, a signal wait) whenever it is done (SPEC §3), so requests are matched to
replies by ``id``: each call sends its request (one send at a time) and then waits
for its reply. Whichever waiting thread finds nobody reading becomes the reader: it
reads for everyone, hands each reply to the thread that asked for it, and when its
own reply is in, wakes the others so one of them reads on. No thread of our own is
started, so a single thread pays nothing for this beyond two uncontended locks.
Everything stays on the one connection, so what the daemon ties to a connection --
a ``bind`` session, ``events.subscribe``, ``query.respond``, the waits it withdraws
when the connection closes -- is where it was.

The first exchange on every connection is ``mesh.info``: the protocol major version
must be ours and the daemon must serve the profile asked for (SPEC §3); its pid and
start time (:attr:`Connection.daemon`) tell one daemon run from the next.

Standard library only.
"""

from __future__ import annotations

import _socket  # not socket: its enums and selectors cost every command's start-up
import _thread
import os
import time
from time import monotonic as _monotonic

from meshctl import _conn, _spawn
from meshd.protocol.errors import FrameTooLarge, MeshError, MeshTimeout, MeshUnavailable

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from collections import deque
else:  # the same class; collections' __init__ is start-up time on every command
    from _collections import deque
if TYPE_CHECKING:
    from types import TracebackType
    from typing import Any, NoReturn

    from meshctl._core.abc import Target


#: How many times this process is a forked child of the one that imported us: a
#: connection opened before a fork belongs to the parent. Counted at fork rather than
#: asked of ``os.getpid()`` on every call (a system call on each round trip).
FORKS = [0]


def _forked() -> None:
    FORKS[0] += 1


os.register_at_fork(after_in_child=_forked)


class Stale(Exception):
    """The daemon had closed the connection before we sent (a restart, an idle close):
    it never read the request, so sending it again on a new connection is safe."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


#: How far past its deadline a read may wait, to spare setting the socket's timeout
#: (a system call) on every call: deadlines are failures' deadlines, not schedules.
_SLACK = 0.05
#: The longest a read sleeps in one system call. A signal that trips Python's flag
#: without waking the reading thread (it landed on another thread, or between the last
#: check and the call) is seen at the next wake-up: Ctrl-C within a second, not at
#: the end of a 60 s wait.
_WAKE = 1.0


class _Waiter:
    """One thread waiting on a connection: for the reply to request ``rid``, or (``rid``
    None) for an event. ``gate`` is a lock it sleeps on while another thread reads
    (made only then); the reader releases it to wake the thread."""

    __slots__ = ("gate", "lost", "reply", "rid")

    def __init__(self, rid: int | None) -> None:
        self.rid = rid
        self.reply: _conn.Reply | None = None
        #: Why the reply will never come (the connection closed), raised to the caller.
        self.lost: MeshError | None = None
        self.gate: Any = None


class Connection:
    """One connection to the daemon, shared by any number of threads: each call's reply
    is read by whichever of them is reading (see the module's docstring); pushed events
    are kept aside (:attr:`events`) for :meth:`next_event`.

    Opening connects (starting the daemon when ``autostart`` allows) and checks
    ``mesh.info``. Any failure closes the connection (:attr:`closed`); the caller
    opens a new one.
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
        #: :data:`FORKS` when it was opened (differs in a forked child).
        self.forks = FORKS[0]
        self._proto = _conn.Protocol()
        # One request written at a time (and request ids taken in order).
        self._send_lock = _thread.allocate_lock()
        # Guards the reading role, the sleepers, and the hand-over of replies to them.
        self._state = _thread.allocate_lock()
        self._reading = False
        self._pending: dict[int, _Waiter] = {}
        self._sleeping: set[_Waiter] = set()
        sock = _spawn.connect_or_start(profile, socket_path, autostart, timeout)
        self._sock: _socket.socket | None = sock
        self._recv_timeout = -1.0  # the reading handle's timeout, as last set
        # Sends go through a second handle on the same socket: the reader sets its own
        # handle's timeout to its deadline, which must not cut short another thread's
        # send (a socket's timeout belongs to the Python object, not the socket).
        self._out: _socket.socket | None = None
        try:
            self._out = _spawn.dup(sock)
            self._out.settimeout(timeout)
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
    def like(cls, mesh: Target) -> Connection:
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
        """Send one request and wait for its reply; events meanwhile are kept aside.

        Raises :class:`Stale` when the daemon had closed the connection before the
        request went out; MeshUnavailable when it closed before the reply came;
        MeshTimeout when no reply came in time. A timeout gives up this call's reply
        only: its id is forgotten, so its reply, if it still comes, is read and dropped
        (:meth:`_route`), and the other threads' calls on the connection carry on. The
        connection is not closed for it: that failed every other call waiting on it
        (a claim queued for minutes, an ask) for one short timeout of one thread.
        What the request set off in the daemon may still happen (a queued claim stays
        queued until its own ``wait`` runs out): give a call that waits a timeout
        longer than its wait, as the library's own calls do.
        """
        rid, waiter = self._post(method, params)
        pending = self._pending
        deadline = _monotonic() + timeout
        state = self._state
        try:
            state.acquire()
            if self._reading or waiter.reply is not None or waiter.lost is not None:
                state.release()
                answered = self._await(waiter, deadline)
            else:  # the common case, inline: nobody reads, so this thread does
                self._reading = True
                state.release()
                try:
                    msg = self._receive(deadline)
                    if msg.__class__ is _conn.Reply and msg.id == rid:  # ours, at once
                        pending.pop(rid, None)  # (another thread's close may have)
                        return msg
                    answered = self._read(waiter, deadline, msg)
                finally:
                    state.acquire()
                    self._reading = False
                    if self._sleeping:
                        self._wake_all()
                    state.release()
        except MeshUnavailable:
            pending.pop(rid, None)
            if waiter.lost is not None:  # closed by another thread: its reason is the news
                raise waiter.lost from None
            raise
        except BaseException:
            pending.pop(rid, None)
            raise
        if not answered:
            pending.pop(rid, None)  # its reply, if it comes, goes to nobody
            raise MeshTimeout(f"no reply from meshd within {timeout} s")
        if waiter.reply is not None:  # answered: a close that came after changes nothing
            return waiter.reply
        assert waiter.lost is not None
        raise waiter.lost

    def _post(self, method: str, params: Any) -> tuple[int, _Waiter]:
        """Send a request (one sender at a time); its waiter is pending before it goes
        out, since another thread may read its reply first."""
        send_lock = self._send_lock
        send_lock.acquire()
        try:
            rid, frame = self._proto.request(method, params)
            waiter = _Waiter(rid)
            self._pending[rid] = waiter
            out = self._out
            if out is None:  # closed by another thread (a timeout): never sent, so
                del self._pending[rid]  # the caller may send it on a new connection
                raise Stale(len(frame))
            try:
                out.sendall(frame)
            except OSError as exc:
                self._pending.pop(rid, None)
                self._send_failed(exc, len(frame))
        finally:
            send_lock.release()
        return rid, waiter

    def next_event(self, timeout: float) -> dict[str, Any] | None:
        """The next pushed event, or None when none came within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        waiter: _Waiter | None = None
        events = self.events
        while True:
            while events:
                try:
                    event = events.popleft()
                except IndexError:  # another thread took it
                    break
                if isinstance(event, dict):
                    return event
            if waiter is None:
                waiter = _Waiter(None)
            if not self._await(waiter, deadline):
                return None

    # --- waiting: one reader at a time, the others asleep on their gates --------------

    def _ready(self, waiter: _Waiter) -> bool:
        if waiter.rid is None:
            return bool(self.events)
        return waiter.reply is not None or waiter.lost is not None

    def _await(self, waiter: _Waiter, deadline: float) -> bool:
        """Until ``waiter`` is ready (True) or the deadline (False): read the socket when
        nobody else does, else sleep until the reader wakes this thread."""
        state = self._state
        while True:
            state.acquire()
            if self._ready(waiter):
                state.release()
                return True
            if self._sock is None:
                state.release()
                raise MeshUnavailable("this connection to meshd is closed")
            if not self._reading:
                self._reading = True
                state.release()
                try:
                    return self._read(waiter, deadline)
                finally:
                    state.acquire()
                    self._reading = False
                    if self._sleeping:
                        self._wake_all()  # one of them reads on
                    state.release()
            gate = waiter.gate
            if gate is None:
                gate = waiter.gate = _thread.allocate_lock()
                gate.acquire()
            self._sleeping.add(waiter)
            state.release()
            left = deadline - time.monotonic()
            try:
                if left > 0 and gate.acquire(True, left):
                    continue  # woken: ready, or the reader left and someone must read on
            except BaseException:  # interrupted (KeyboardInterrupt): not asleep any more
                with state:
                    self._sleeping.discard(waiter)
                raise
            with state:
                if waiter in self._sleeping:
                    self._sleeping.discard(waiter)
                else:  # woken just as the wait ran out: take the gate back
                    gate.acquire(False)
                return self._ready(waiter)

    def _wake_all(self) -> None:
        """Wake every sleeping thread (``_state`` held)."""
        sleeping = self._sleeping
        while sleeping:
            sleeping.pop().gate.release()

    def _read(
        self, waiter: _Waiter, deadline: float, msg: _conn.Reply | _conn.Event | None = None
    ) -> bool:
        """As the reader: route ``msg`` (if given) and what arrives after it, until
        ``waiter`` is ready (True) or the deadline (False)."""
        if msg is None:
            msg = self._next(waiter, deadline)
        while msg is not None:
            self._route(msg, waiter)
            msg = self._next(waiter, deadline)
        return self._ready(waiter)

    def _route(self, msg: _conn.Reply | _conn.Event, mine: _Waiter) -> None:
        """Hand ``msg`` to whoever waits for it (the reader's own reply needs no lock)."""
        if isinstance(msg, _conn.Event):
            with self._state:
                self.events.append(msg.params)
                for other in [w for w in self._sleeping if w.rid is None]:
                    self._sleeping.discard(other)
                    other.gate.release()
            return
        rid = msg.id
        pending = self._pending
        if rid is not None and rid == mine.rid:
            pending.pop(rid, None)
            mine.reply = msg
            return
        if rid is None and msg.error is not None:
            # A connection the daemon would not take (too many, another uid) is told
            # so in one line before it is closed: that error is the answer to show.
            self.close(lost=_conn.lost_to(msg.error))
            return
        target = pending.pop(rid, None) if isinstance(rid, int) else None
        if target is None:
            return  # the reply of a call that gave up (timed out): dropped
        with self._state:
            target.reply = msg
            if target in self._sleeping:
                self._sleeping.discard(target)
                target.gate.release()

    def _next(self, waiter: _Waiter, deadline: float) -> _conn.Reply | _conn.Event | None:
        """The next message for the reader, or None once ``waiter`` is ready or at the
        deadline."""
        if self._ready(waiter):
            return None
        return self._receive(deadline)

    # --- the socket -------------------------------------------------------------------

    def _send_failed(self, exc: OSError, size: int) -> NoReturn:
        """The send of a ``size``-byte request failed with ``exc``: close, and say why."""
        if self._sock is None:  # another thread closed it under the send: not sent whole
            raise Stale(size) from None
        if isinstance(exc, (BrokenPipeError, ConnectionResetError)):
            refusal = self._refusal()
            self.close(_conn.closed_before_reply(0))
            if refusal is not None and _conn.refused(refusal):
                raise refusal from None  # not taken at all: "too many connections …"
            if refusal is not None:
                raise FrameTooLarge(
                    f"meshd refused a {size}-byte request: {refusal.message}; send less per call",
                    refusal.data,
                ) from None
            raise Stale(size) from None
        if isinstance(exc, TimeoutError):
            self.close(f"meshd did not read a request within {self.timeout} s; retry")
            raise MeshTimeout(f"meshd did not read a request within {self.timeout} s") from None
        message = f"lost the connection to meshd: {exc}; retry"
        self.close(message)
        raise MeshUnavailable(message) from exc

    def _refusal(self) -> MeshError | None:
        """After a failed send: the -32600 the daemon may have sent before closing
        (looked for only when no other thread is reading)."""
        sock = self._sock
        if sock is None:
            return None
        with self._state:
            if self._reading:
                return None
            self._reading = True
        try:
            sock.settimeout(0.05)
            self._recv_timeout = 0.05
            while (msg := self._proto.next_message()) is None:
                data = sock.recv(65536)
                if not data:
                    return None
                self._proto.feed(data)
        except (OSError, MeshError):
            return None
        finally:
            with self._state:
                self._reading = False
                self._wake_all()
        if isinstance(msg, _conn.Reply) and msg.error is not None and msg.error.code == -32600:
            return msg.error
        if isinstance(msg, _conn.Reply) and msg.error is not None and msg.id is None:
            return msg.error if _conn.refused(msg.error) else None
        return None

    def _receive(self, deadline: float) -> _conn.Reply | _conn.Event | None:
        """The next message, or None at the deadline; MeshUnavailable when the daemon left."""
        proto = self._proto
        msg = proto.next_message()
        while msg is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            sock = self._sock
            if sock is None:
                raise MeshUnavailable("this connection to meshd is closed")
            try:
                # Setting a socket's timeout is a system call: keep the last one when it
                # ends no earlier than the deadline and at most SLACK after it.
                if left > _WAKE:
                    if self._recv_timeout != _WAKE:
                        self._recv_timeout = _WAKE
                        sock.settimeout(_WAKE)
                elif not left <= self._recv_timeout <= left + _SLACK:
                    self._recv_timeout = left + _SLACK / 2
                    sock.settimeout(self._recv_timeout)
                data = sock.recv(65536)
            except TimeoutError:
                if deadline - time.monotonic() > 0:  # cut short by a shorter timeout
                    continue
                return None
            except OSError as exc:
                message = f"lost the connection to meshd: {exc}; retry"
                self.close(message)
                raise MeshUnavailable(message) from exc
            if not data:
                message = _conn.closed_before_reply(proto.partial)
                self.close(message)
                raise MeshUnavailable(message)
            msg = proto.take(data)
        return msg

    def abandon(self) -> None:
        """In a forked child: let go of the parent's connection without a lock (another
        thread of the parent may have held one at the fork) and without ``shutdown``
        (the parent keeps using the socket). Waiting calls were the parent's threads'."""
        sock, self._sock = self._sock, None
        out, self._out = self._out, None
        for s in (sock, out):
            if s is not None:
                s.close()

    def close(self, why: str | None = None, *, lost: MeshError | None = None) -> None:
        """Close the connection (the daemon forgets its subscriptions). Idempotent.

        Calls still waiting on it fail: with ``lost``, else with MeshUnavailable saying
        ``why``, else with MeshError (it was closed on purpose). In a forked child this
        closes only the child's copy of the socket (no ``shutdown``): the parent keeps
        its connection.
        """
        with self._state:
            sock, self._sock = self._sock, None
            out, self._out = self._out, None
            pending = list(self._pending.values())
            self._pending.clear()
            for waiter in pending:
                if lost is not None:
                    waiter.lost = lost
                elif why is None:
                    waiter.lost = MeshError("the connection to meshd was closed (close())")
                else:
                    waiter.lost = MeshUnavailable(why)
            self._wake_all()
        if sock is not None:
            if self.pid == os.getpid():
                self._shutdown(sock)
            sock.close()
        if out is not None:
            out.close()
        if not self._reading:
            self._proto.clear()

    @staticmethod
    def _shutdown(sock: Any) -> None:
        """Shut both directions down (which also wakes a thread reading it); a socket
        the peer already dropped is fine. (Not contextlib.suppress: contextlib costs
        start-up time on every command.)"""
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
