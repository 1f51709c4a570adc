"""The composition root: lock, restore, listen, serve; then an ordered, shielded shutdown.

Start-up order matters and each step can refuse to start with a message that
says what to do: paths and config → the profile flock → the listener (adopted
from systemd, or bound at the socket path with mode 0600 in a 0700 folder; it
accepts nothing yet, connections wait in its backlog) -- these three in
:mod:`meshd.startup`, before this module loads -- → the database (open,
migrate, restore; a failure removes the socket again) → tasks (writer, server,
sweeper, process watcher, socket guard, signals, watchdog) → ``READY=1``.

Shutdown (SIGTERM/SIGINT): stop accepting, then, shielded and with a deadline,
write a final snapshot and flush every queued write; remove the socket if it is
still ours. The flock goes with the process.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import resource
import signal
import sys
from pathlib import Path

import anyio
from anyio.abc import SocketListener, TaskGroup

from meshd import __version__, config, sdnotify
from meshd.core.clock import SystemClock
from meshd.core.settings import Settings
from meshd.core.state import MeshState, Write
from meshd.domain import Domain
from meshd.domains.board import BoardHandlers
from meshd.domains.board_work import BoardWorkHandlers
from meshd.domains.claim_view import ClaimView
from meshd.domains.claims import ClaimHandlers
from meshd.domains.fleet import FleetDomain
from meshd.domains.fleet_mail import FleetMail
from meshd.domains.jobs import JobHandlers
from meshd.domains.ledger import LedgerHandlers
from meshd.domains.mesh import MeshHandlers
from meshd.domains.messages import MessageHandlers
from meshd.domains.notes import NoteHandlers
from meshd.domains.preempt import PreemptHandlers
from meshd.domains.sessions import SessionHandlers
from meshd.domains.signals import SignalHandlers
from meshd.domains.watch import WatchHandlers
from meshd.paths import PathError, ProfilePaths, ensure_socket_dir
from meshd.server import eventloop, socketfile
from meshd.server.serve import Server
from meshd.service import Service
from meshd.startup import Begun, Listening, StartupError, listen, prepare, record
from meshd.store import Store, StoreError

log = logging.getLogger("meshd")
SWEEP_INTERVAL = 0.25
GUARD_INTERVAL = 1.0
SHUTDOWN_DEADLINE = 5.0
RELOAD_TIMEOUT = 10.0
"""Seconds a reload waits for the config file to be read before keeping the old one."""


def wire(svc: Service) -> list[Domain]:
    """Every domain the daemon serves, made and wired here -- the one place that does --
    and listed in schema and restore order (one line to add one).

    Each domain is handed the collaborators it uses (no domain looks another up); the
    fleet (SPEC §12) is a backend beneath claims, sessions and mail, reached through
    the ports of :mod:`meshd.ports`: :class:`FleetDomain` is the ``FleetAccess`` the
    claims, sessions and fleet mail domains are given, and it is given this host's
    lock table, live sessions and mail desk in turn.
    """
    fleet = FleetDomain(svc)  # the [fleet] link; its fleet is None while this host is alone
    view = ClaimView(svc.state, fleet)  # who holds a key: every read that reports claims
    sessions = SessionHandlers(svc, fleet=fleet, view=view)
    claims = ClaimHandlers(svc, fleet=fleet, view=view)
    mail = FleetMail(svc, fleet=fleet)
    messages = MessageHandlers(svc, fleet=mail)
    signals = SignalHandlers(svc, fleet=mail)
    mail.connect(messages=messages, signals=signals)
    fleet.connect(table=claims, sessions=sessions, desk=mail)
    return [
        MeshHandlers(svc, parked=signals.parked),
        sessions,
        claims,  # after sessions: restores only the claims of restored sessions
        mail,  # the fleet's outbox and seen keys, before the messages and signals it routes
        messages,
        BoardHandlers(svc),
        NoteHandlers(svc),  # restores shared work (notes, signals, ledger, marks) for the rest
        JobHandlers(
            svc, view=view
        ),  # after sessions: a restored run whose session is gone ends as died
        WatchHandlers(svc),  # the mesh.watch feed (meshctl top)
        PreemptHandlers(svc, claims=claims),  # after claims and the notebook
        signals,
        LedgerHandlers(svc),
        BoardWorkHandlers(svc),
        fleet,
    ]


def setup_logging(level: str) -> None:
    """Log to stderr in a form both journald and a terminal read well.

    Under systemd (``JOURNAL_STREAM`` set) lines carry an ``<N>`` priority prefix
    and no timestamp (journald adds its own); on a terminal, a local timestamp.
    """
    handler = logging.StreamHandler(sys.stderr)
    if os.environ.get("JOURNAL_STREAM"):
        handler.setFormatter(_JournalFormatter("%(name)s: %(message)s"))
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")
        )
    root = logging.getLogger("meshd")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


class _JournalFormatter(logging.Formatter):
    _PRIO = {"DEBUG": 7, "INFO": 6, "WARNING": 4, "ERROR": 3, "CRITICAL": 2}

    def format(self, record: logging.LogRecord) -> str:
        return f"<{self._PRIO.get(record.levelname, 6)}>{super().format(record)}"


def raise_fd_limit() -> None:
    """Lift the soft RLIMIT_NOFILE to the hard limit: 1,000 clients need 1,000 fds."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 16
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            log.debug("could not raise RLIMIT_NOFILE above %d", soft)


class Daemon:
    """One profile's daemon: owns the store, the state, the server and the tasks."""

    def __init__(
        self, paths: ProfilePaths, settings: Settings, listening: Listening | None = None
    ) -> None:
        self.paths = paths
        self._listening = listening
        """The socket :mod:`meshd.startup` bound before this module loaded (or None:
        :meth:`run` binds it)."""
        self.store = Store(paths.database)
        self.state = MeshState(SystemClock(), settings, paths.profile)
        self.service = Service(self.state, self.store, paths, domains=wire, reload=self.reload)
        self.server = Server(self.service)
        self._listener_ino: int | None = None
        self._listener: SocketListener | None = None
        self._served: Path = paths.socket
        self._adopted = False
        self._tg: TaskGroup | None = None
        self.loop_name = "asyncio"
        """The event loop it runs on (``run`` sets it; see :mod:`meshd.server.eventloop`)."""

    # --- configuration ------------------------------------------------------------

    async def reload(self) -> tuple[bool, str | None]:
        """Re-read config.toml; an invalid file keeps the old config and says so.

        The file is read and checked in a worker thread (:func:`meshd.config.load`
        reads only a bounded regular file, but a hung mount can still stall a read):
        the loop keeps serving meanwhile, and a read that takes longer than
        :data:`RELOAD_TIMEOUT` is given up, keeping the old config."""
        path, profile = self.paths.config, self.paths.profile
        settings = None
        try:
            with anyio.move_on_after(RELOAD_TIMEOUT):
                settings = await anyio.to_thread.run_sync(
                    config.load, path, profile, abandon_on_cancel=True
                )
        except config.ConfigError as exc:
            log.error("reload refused, keeping the old config: %s", exc)
            return False, str(exc)
        if settings is None:
            why = f"{path}: not read within {RELOAD_TIMEOUT:g} s (a hung mount?)"
            log.error("reload refused, keeping the old config: %s", why)
            return False, why
        self.state.reconfigure(settings)
        log.info("config reloaded from %s", self.paths.config)
        return True, None

    def open_store(self) -> None:
        """Open and migrate the database, then let every domain restore (blocking)."""
        self.store.open()
        self.store.restore(self.service.restore)

    # --- listener -------------------------------------------------------------------

    def _serving(self, path: Path) -> None:
        """Remember which socket file is ours, and record it for clients (SPEC §2)."""
        self._served = path
        self._listener_ino = record(self.paths, path)

    async def _bind(self) -> SocketListener:
        """Bind the socket path again, replacing it only when it is free (the socket
        guard; see :mod:`meshd.server.socketfile`). The probe and the bind run in a worker
        thread: a wedged daemon at the path may keep the probe waiting
        :data:`~meshd.server.socketfile.PROBE_TIMEOUT`."""
        path = self._served
        problem = await anyio.to_thread.run_sync(socketfile.occupant, path)
        if problem is not None:
            raise StartupError(f"cannot listen on {path}: {problem}")
        try:
            listener = await socketfile.bind(path)
        except OSError as exc:
            raise StartupError(f"cannot listen on {path}: {exc.strerror or exc}") from exc
        self._adopted = False  # bound by us: ours to unlink on stop
        self._serving(path)
        self._listener = listener
        return listener

    async def listener(self) -> SocketListener:
        """The socket bound (or adopted) at start (:func:`meshd.startup.listen`), for the loop."""
        if self._listening is None:
            self._listening = listen(self.paths)
        bound = self._listening
        if bound.adopted:
            log.info("adopted the socket passed by systemd")
        self._adopted = bound.adopted
        self._served = bound.path
        self._listener_ino = bound.ino
        listener = await SocketListener.from_socket(bound.sock)
        self._listener = listener
        return listener

    async def _guard_socket(self) -> None:
        """Keep the socket reachable (SPEC §2): logout clean-up must not orphan the daemon.

        Every second: if the path no longer holds our socket and is free (removed,
        its folder removed, or a dead socket), bind it again -- folder included --
        and close the listener it replaces. If something else holds it (another
        live daemon, a file, a folder), leave it, say so once, and look again
        later: two daemons given one ``MESH_SOCKET`` never take it from each other.
        """
        said: str | None = None
        while True:
            await anyio.sleep(GUARD_INTERVAL)
            if self._listener_ino is None or self._still_ours():
                said = None
                continue
            path = self._served
            problem = await anyio.to_thread.run_sync(socketfile.occupant, path)
            if problem is None:
                try:
                    await self._rebind()
                except (OSError, PathError, StartupError) as exc:
                    problem = f"cannot re-create it: {exc}"
                else:
                    said = None
                    continue
            if problem != said:
                log.warning(
                    "socket %s is no longer ours and is not re-bound while %s; "
                    "clients cannot reach this daemon meanwhile", path, problem,
                )  # fmt: skip
                said = problem

    def _still_ours(self) -> bool:
        try:
            return self._served.stat().st_ino == self._listener_ino
        except OSError:
            return False

    async def _rebind(self) -> None:
        """Bind the path again (creating its folder 0700) and close the replaced listener."""
        ensure_socket_dir(self._served.parent)
        old = self._listener
        listener = await self._bind()
        log.warning("socket %s was removed or replaced; created it again", self._served)
        assert self._tg is not None
        self._tg.start_soon(self.server.serve, listener)
        if old is not None:
            await old.aclose()  # its serve loop ends; open connections carry on

    # --- background tasks -----------------------------------------------------------

    async def _sweeper(self) -> None:
        tick = 0.0
        while True:
            await anyio.sleep(SWEEP_INTERVAL)
            self.service.sweep()
            self.server.close_idle()
            tick += SWEEP_INTERVAL
            if tick >= self.state.settings.snapshot_interval:
                tick = 0.0
                writes = self.state.snapshot_writes()
                self.store.submit(writes, on_done=functools.partial(self._redirty, writes))

    def _redirty(self, writes: list[Write], error: BaseException | None) -> None:
        """A snapshot that could not be stored (disk full) is tried again next time.

        ``snapshot_writes`` forgets which sessions changed; without this, a change
        made while the disk was full would never be stored, not even by the final
        snapshot at SIGTERM. The write holds the live session, so a retry stores its
        latest fields.
        """
        if error is None:
            if writes:
                self.service.committed(writes, [])
            return
        dirty = self.state.registry.dirty
        for w in writes:
            if w[0] == "session.snapshot" and w[1].session_id in self.state.registry.sessions:
                dirty.add(w[1].session_id)

    async def _signals(self, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as sigs:
            async for sig in sigs:
                if sig == signal.SIGHUP:
                    assert self._tg is not None
                    self._tg.start_soon(self.reload)  # a slow read never delays a SIGTERM
                    continue
                log.info("received %s; shutting down", signal.Signals(sig).name)
                sdnotify.notify("STOPPING=1")
                scope.cancel()
                return

    @staticmethod
    async def _watchdog(interval: float) -> None:
        while True:
            sdnotify.notify("WATCHDOG=1")
            await anyio.sleep(interval)

    # --- main -------------------------------------------------------------------------

    async def run(self) -> None:
        # Listen first, serve after the restore: a client that connects meanwhile
        # waits in the listen backlog -- nothing is accepted, so no request is read
        # before every domain has restored -- instead of polling for a socket that
        # is not there yet (an auto-starting client; the benchmark's prober).
        listener = await self.listener()
        try:
            # On the loop itself: nothing is served yet, so nobody waits for it, and
            # the hand-offs to a worker thread and back were start-up time (a
            # daemon's start is an auto-starting client's wait).
            self.open_store()
        except BaseException as exc:
            await listener.aclose()
            self._remove_socket()
            if isinstance(exc, StoreError):
                raise StartupError(str(exc)) from exc
            raise
        self.store.start()
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                await tg.start(self.service.pids.run)
                for s in list(self.state.registry.sessions.values()):
                    if s.pid is None and not s.anchors:
                        continue  # no process to watch (most heartbeat sessions)
                    for pid, start in s.pids():  # re-checked at once; the dead go now
                        self.service.pids.watch(s.session_id, pid, start)
                await tg.start(self.server.serve, listener)
                tg.start_soon(self._sweeper)
                tg.start_soon(self._guard_socket)
                tg.start_soon(self._signals, tg.cancel_scope)
                for domain in self.service.runners:
                    tg.start_soon(domain.run)
                if (interval := sdnotify.watchdog_interval()) is not None:
                    tg.start_soon(self._watchdog, interval)
                n = len(self.state.registry.sessions)
                # Everything allocated so far (modules, restored sessions) lives as long
                # as the daemon: out of the collector's sight, a full GC pause stays
                # under a millisecond instead of tens (bench finding 8). Applied once,
                # here: sessions registered later hold nothing the collector walks
                # (core.session_records.Session). The collector was off until now
                # (meshd.cli.serve): the ~70 collections the imports and the restore
                # set off cost the start 8-20 ms, and they, like one collection here,
                # would free only a few hundred objects of import-time cycles.
                gc.freeze()
                gc.enable()
                # A full collection walks every live object, and 10,000 queued waits
                # are 10,000 tasks with their scopes: at the default pace (one every
                # 10 middle ones) queueing cost grew with the queue, 112 -> 221 µs of
                # CPU a waiter from 1,000 to 10,000; one every 100 keeps it flat
                # (131 -> 127 µs). Young objects are collected as often as before.
                gc.set_threshold(700, 10, 100)
                log.info(
                    "meshd %s serving profile %s on %s (%d sessions restored; %s loop)",
                    __version__, self.paths.profile, self._served, n, self.loop_name,
                )  # fmt: skip
                sdnotify.notify(f"READY=1\nSTATUS=serving {n} sessions")
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(SHUTDOWN_DEADLINE):
                self.store.submit(self.state.snapshot_writes())
                await self.store.flush()
            self.store.stop()
            self.store.close()
            self._remove_socket()
            log.info("stopped")

    def _remove_socket(self) -> None:
        """Unlink the socket we bound; a socket systemd passed us stays (it is systemd's)."""
        if self._adopted:
            return
        path = self._served
        try:
            if self._listener_ino is not None and path.stat().st_ino == self._listener_ino:
                path.unlink()
                self.paths.socket_record.unlink(missing_ok=True)
        except OSError:
            pass


def run(begun: Begun | str) -> int:
    """Run the daemon in the foreground until SIGTERM/SIGINT; the exit status.

    ``begun``: what :mod:`meshd.startup` did before this module loaded (the
    ``meshd run`` path), or a profile name to do it now.
    """
    if isinstance(begun, str):
        begun = Begun(begun)
    try:
        raise_fd_limit()
        daemon = Daemon(begun.paths, begun.settings, begun.listening)
        daemon.loop_name = begun.loop
        anyio.run(daemon.run, backend_options=eventloop.backend_options(begun.loop))
    except StartupError:
        raise
    except KeyboardInterrupt:
        pass
    finally:
        begun.listening.discard(begun.paths)  # a start that failed before run() took it
    return 0


__all__ = ["Daemon", "StartupError", "prepare", "run", "setup_logging", "wire"]
