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
"""

from __future__ import annotations

import os
import socket as _socket
import threading
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any

from meshctl import _claims, _conn, _events, _paths, _session, _spawn
from meshctl import _log as log
from meshctl._messaging import MessagingMixin
from meshctl._preempt import PreemptWatcher
from meshctl._shared import SharedMixin
from meshd.protocol import contract
from meshd.protocol.errors import (
    FrameTooLarge,
    MeshError,
    MeshTimeout,
    MeshUnavailable,
    SessionExpired,
    UnknownSession,
)

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
        self._lock = threading.Lock()
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


class Session(MessagingMixin, SharedMixin):
    """A registered session: heartbeats from a daemon thread, ends on exit.

    What it never hides: when the daemon expired or forgot the session, or restarted
    without it, the session registers again under the same id and appends a sentence
    to :attr:`lost` (and calls ``on_lost`` with it, and logs one warning).

    It degrades to a no-op, and says so once, when the mesh is disabled in config
    (``disabled`` is True) or unreachable with ``fail_open`` (it keeps trying to
    register in the background).
    """

    def __init__(
        self,
        mesh: Mesh,
        core: _session.SessionCore,
        *,
        on_lost: Callable[[str], Any] | None = None,
        heartbeat_interval: float | None = None,
    ) -> None:
        self.mesh = mesh
        self._core = core
        self._on_lost = on_lost
        self._interval_override = heartbeat_interval
        self._state = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._registered = False
        self._ended = False
        #: Heartbeats the background thread got answered (tests wait on it).
        self.beats = 0
        self._beat_cond = threading.Condition()

    @property
    def session_id(self) -> str | None:
        """The session's id (generated by the daemon unless given)."""
        return self._core.session_id

    @property
    def lost(self) -> list[str]:
        """One sentence per thing the daemon lost for this session."""
        return self._core.lost

    @property
    def disabled(self) -> bool:
        """The mesh is switched off in config: this session is a no-op."""
        return self._core.disabled

    @property
    def active(self) -> bool:
        """Registered with a daemon, not disabled, not ended."""
        return self._registered and not self._core.disabled and not self._ended

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between background heartbeats."""
        return self._core.interval

    # --- lifecycle ---------------------------------------------------------------

    def __enter__(self) -> Session:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.end(reason="ended" if exc_type is None else f"error: {exc_type.__name__}")
        except MeshError as failure:
            # Leaving the block must not fail on the mesh (unreachable, hung, refusing):
            # the daemon expires the session once its heartbeats stop (or its process ends).
            log.warning("Session Mesh: could not end session %s: %s", self.session_id, failure)

    def start(self) -> Session:
        """Register and start heartbeating (done by ``with``)."""
        with self._state:
            if self._thread is not None:
                return self
            self._register()
            if not self._core.disabled:
                self._thread = threading.Thread(
                    target=self._run, name=f"meshctl-heartbeat-{self.session_id}", daemon=True
                )
                self._thread.start()
        return self

    def heartbeat(self, status: str | None = None, task: str | None = None, **fields: Any) -> Any:
        """Report what changed (None = unchanged) and say "still here"."""
        fields.update(status=status, task=task)
        with self._state:
            for key in ("status", "task", "cwd", "repo", "branch", "worktree", "tools"):
                if fields.get(key) is not None:
                    self._core.params[key] = fields[key]
            if not self.active:
                return None
            params = self._core.heartbeat_params(fields)
            try:
                result = self.mesh.call("session.heartbeat", params)
            except (SessionExpired, UnknownSession) as exc:
                self._reregister(exc)
                result = self.mesh.call("session.heartbeat", self._core.heartbeat_params(fields))
            if result is not None:
                self._heard(result)
                if self.mesh.daemon != self._core.daemon:
                    self._daemon_changed()
            return result

    def end(self, handoff: str | None = None, *, reason: str = "ended") -> Any:
        """End the session (releasing its claims), optionally leaving a handoff."""
        with self._state:
            if self._ended:
                return None
            self._ended = True
            active = self._registered and not self._core.disabled
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.mesh.timeout + 1.0)
        if not active:
            return None
        params: dict[str, Any] = {"session_id": self.session_id, "reason": reason}
        if handoff is not None:
            params["handoff"] = handoff
        try:
            result = self.mesh.call("session.end", params)
        except (SessionExpired, UnknownSession):
            return None
        self._core.held.clear()
        return result

    # --- preemption (SPEC §5b) ----------------------------------------------------

    def on_preempt(self, callback: Callable[[_events.PreemptEvent], Any]) -> PreemptWatcher | None:
        """Call ``callback(event)`` when a higher-ranked session asks this one to
        checkpoint and pause (``event.by``, ``event.reason``, ``event.grace_s``,
        ``event.resources``), on a thread of its own; answer with :meth:`pause` at a
        safe point. Returns the watcher (``stop()``), or None when not active."""
        if not self.active:
            log.warning("Session Mesh: session %s is not active; on_preempt does nothing",
                        self.session_id)  # fmt: skip
            return None
        return PreemptWatcher(self, callback).start()

    def pause(self, note: str) -> dict[str, Any] | None:
        """Checkpoint: leave ``note`` (a shared note and a handoff), set status ``paused``
        and release every claim into a reserved set (the preemptors first, then this
        session). The result names the reserved resources; None when a no-op."""
        result = self._mcall("session.pause", {"note": note})
        if result is not None:
            self._core.held.clear()  # released into the reservation, not lost
        return None if result is None else dict(result)

    def resume(self, wait: float | None = None) -> dict[str, Any] | None:
        """Queue for the reserved set (up to ``wait`` s; default the daemon's
        max_query_timeout); the result carries the checkpoint ``note``, ``status``
        ``resumed`` or ``held``, and ``reservation`` (``kept``, ``none``, ``lost``)."""
        params: dict[str, Any] = {} if wait is None else {"wait": wait}
        result = self._mcall("session.resume", params, wait=60.0 if wait is None else wait)
        return None if result is None else dict(result)

    # --- claims (SPEC §5) ---------------------------------------------------------

    def claim(
        self,
        *resources: str,
        shared: bool = False,
        reason: str = "",
        ttl: float | None = None,
        wait: float = 0.0,
        broad: bool = False,
    ) -> Claim:
        """Claim ``resources`` as one set (all or nothing); use the handle as a context manager.

        ``with s.claim("file:/x", wait=10) as c: if c.granted: …`` -- leaving the block
        releases what this call acquired, never a claim the session ``already_held``.
        Relative paths are resolved against the working folder (the daemon refuses them).
        ``wait`` > 0 queues (FIFO) until the whole set is granted or the wait runs out.
        When the session is a no-op (mesh disabled, or unreachable with ``fail_open``),
        the handle is granted and :attr:`Claim.guarded` is False.
        """
        if not resources:
            raise ValueError("claim() needs at least one resource")
        keys = _claims.resolve_all(resources)
        with self._state:
            if not self.active:
                return Claim(self, {"status": "granted", "disabled": True}, keys, guarded=False)
            params = _claims.acquire_params(
                str(self.session_id),
                keys,
                shared=shared,
                reason=reason,
                ttl=ttl,
                wait=wait,
                broad=broad,
            )
            timeout = _claims.wait_timeout(wait, self.mesh.timeout)
            try:
                result = self.mesh.call(_claims.ACQUIRE, params, timeout=timeout)
            except (SessionExpired, UnknownSession) as exc:
                self._reregister(exc)
                params["session_id"] = self.session_id
                result = self.mesh.call(_claims.ACQUIRE, params, timeout=timeout)
        if result is None:  # failing open
            return Claim(self, {"status": "granted", "disabled": True}, keys, guarded=False)
        with self._state:
            return Claim(self, result, keys, guarded=not result.get("disabled", False))

    def check(self, *resources: str) -> dict[str, Any]:
        """``claim.check``: other sessions' overlapping claims (``conflicts``), and live
        sessions working there without a claim (``present``). Paths may be relative."""
        params: dict[str, Any] = {"resources": _claims.resolve_all(resources)}
        if self.active:
            params["session_id"] = self.session_id
        result = self.mesh.call(_claims.CHECK, params)
        return {} if result is None else dict(result)

    def release(self, *resources: str) -> list[str]:
        """Release ``resources`` (all of the session's claims when none are named).

        Idempotent: releasing what the session does not hold is not an error.
        Returns what the daemon released.
        """
        if not self.active:
            return []
        params: dict[str, Any] = {"session_id": self.session_id}
        if resources:
            params["resources"] = _claims.resolve_all(resources)
        try:
            result = self.mesh.call(_claims.RELEASE, params)
        except (SessionExpired, UnknownSession):
            return []  # an ended session holds nothing
        released = [] if result is None else [str(r) for r in result.get("released") or []]
        with self._state:
            self._core.released(released)
        return released

    # --- registration and loss ---------------------------------------------------

    def _register(self) -> bool:
        """Register (or register again under the same id); False when unreachable."""
        core = self._core
        result = self.mesh.call("session.register", core.register_params())
        if result is None:  # failing open
            if core.session_id is None:
                core.session_id = _local_id(core.params.get("source"))
            return False
        core.registered(result, self.mesh.daemon, self._interval_override)
        self._registered = True
        if core.disabled:
            log.warning(
                "Session Mesh is disabled in its config (enabled = false): session %s does nothing",
                core.session_id,
            )
        return True

    @property
    def registration(self) -> int:
        """How many times this session registered (a call that saw it expire passes the
        number it started under to :meth:`_recover`)."""
        return self._core.generation

    def _recover(self, exc: MeshError, generation: int) -> None:
        """A call made under registration ``generation`` found the session expired or
        unknown: register again -- unless another thread already did since, so one
        expiry is recorded once. Call with ``_state`` held."""
        if self._core.generation == generation:
            self._reregister(exc)

    def _reregister(self, exc: MeshError) -> None:
        old = self._core.daemon
        self._register()
        self._record(self._core.after_expiry(exc, old, self._validate_held()))

    def _daemon_changed(self) -> None:
        """The daemon restarted but still answered for us: register again to find out,
        then check every token this client holds (a restored claim may have run out
        meanwhile) and report exactly which claims were lost."""
        old = self._core.daemon
        result = self.mesh.call("session.register", self._core.register_params())
        if result is None:
            return
        self._core.registered(result, self.mesh.daemon, self._interval_override)
        message = self._core.after_restart(old, result, self._validate_held())
        if message is None:
            log.info("meshd restarted and restored session %s", self.session_id)
        else:
            self._record(message)

    def _validate_held(self) -> list[tuple[str, int]]:
        """``claim.validate`` every (key, token) this client holds; the ones that failed."""
        lost = []
        for key, token in self._core.to_validate():
            try:
                result = self.mesh.call(_claims.VALIDATE, {"resource": key, "token": token})
            except MeshError as exc:
                log.warning("Session Mesh: could not validate %s (token %s): %s", key, token, exc)
                continue
            if result is not None and not result.get("valid", False):
                lost.append((key, token))
        self._core.invalid(lost)
        return lost

    def _heard(self, result: Any) -> None:
        """Take the claim losses a heartbeat reported (``lost``); record each once."""
        for message in self._core.heard(result):
            self._record(message)

    def _record(self, message: str) -> None:
        self._core.lost.append(message)
        log.warning("Session Mesh: %s", message)
        if self._on_lost is not None:
            try:
                self._on_lost(message)
            except Exception:
                log.exception("on_lost callback failed")

    # --- the heartbeat thread ----------------------------------------------------

    def _run(self) -> None:
        """Heartbeat every interval on a connection of our own; back off while it fails."""
        mesh = self.mesh
        own = Mesh(mesh.profile, mesh.socket_path, autostart=mesh.autostart, timeout=mesh.timeout)
        # Not registered yet (failing open): poll often; the Mesh's own backoff decides
        # when a connection is really attempted, so polling costs nothing meanwhile.
        wait = self._core.interval if self._registered else _BACKOFF_FIRST
        try:
            while not self._stop.wait(wait):
                if self._beat(own):
                    wait = self._core.interval if self._registered else _BACKOFF_FIRST
                elif not self._registered:
                    wait = _BACKOFF_FIRST
                else:
                    wait = min(max(wait * 2, _BACKOFF_FIRST), _BACKOFF_MAX)
        finally:
            own.close()

    def _beat(self, own: Mesh) -> bool:
        """One background heartbeat; False when the daemon could not be reached."""
        with self._state:
            if self._ended:
                return True
            try:
                if not self._registered:
                    return self._register()
                result = own.call(
                    "session.heartbeat",
                    {"session_id": self.session_id, "lost_after": self._core.lost_after},
                )
                if result is not None:
                    self._heard(result)
                if own.daemon != self._core.daemon:
                    self._daemon_changed()
            except (SessionExpired, UnknownSession) as exc:
                try:
                    self._reregister(exc)
                except MeshError as again:
                    log.warning("Session Mesh: could not register again: %s", again)
                    return False
            except MeshUnavailable as exc:
                log.debug("heartbeat: %s", exc)
                return False
            except MeshError as exc:
                log.warning("Session Mesh heartbeat failed: %s", exc)
                return False
        with self._beat_cond:
            self.beats += 1
            self._beat_cond.notify_all()
        return True

    def wait_beats(self, count: int, timeout: float) -> bool:
        """Block until :attr:`beats` reaches ``count``; False on timeout (for tests, tools)."""
        with self._beat_cond:
            return self._beat_cond.wait_for(lambda: self.beats >= count, timeout)

    def __repr__(self) -> str:
        return f"<Session {self.session_id!r} active={self.active}>"


class Claim(_session.ClaimRecord):
    """What one ``Session.claim`` call got; releases what it acquired when its block ends.

    The fields are :class:`meshctl._session.ClaimRecord`'s; call :meth:`validate` to
    ask the daemon now whether the token still holds.
    """

    def __init__(
        self, session: Session, result: dict[str, Any], requested: list[str], *, guarded: bool
    ) -> None:
        self.session = session
        super().__init__(session._core, result, requested, guarded=guarded)

    def _noticed(self, keys: list[str]) -> bool:
        """A claim-loss event for our token among the events the main connection kept
        aside (when something subscribed it); heartbeats report losses either way."""
        return any(
            e.token == self.token and set(e.resources) & set(keys)
            for e in _events.claim_losses(list(self.session.mesh._events))
        )

    def validate(self) -> bool:
        """Ask the daemon whether our token still holds every key of the set (fencing)."""
        if not self.granted or not self.guarded:
            return self.granted
        call = self.session.mesh.call
        return self._validated(
            [call(_claims.VALIDATE, {"resource": k, "token": self.token}) for k in self.keys]
        )

    def release(self) -> list[str]:
        """Release what this call acquired (never an ``already_held`` claim); once."""
        if self._released or not self.acquired:
            self._released = True
            return []
        self._released = True
        return self.session.release(*self.acquired)

    def __enter__(self) -> Claim:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.release()
        except MeshError as failure:
            # Never raise on the way out; say so, and keep it on the handle. The claim
            # goes when the session ends or expires (or its ttl runs out).
            log.warning("Session Mesh: %s", self._release_failed(failure))


def _local_id(source: Any) -> str:
    """An id for a session registered later (the daemon was unreachable)."""
    import secrets

    return f"{source or 'python'}:{time.strftime('%Y%m%d')}-{secrets.token_hex(3)}"
