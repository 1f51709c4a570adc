"""Everything that can refuse a daemon's start, done before the daemon's own modules load.

Why: a client that finds no socket polls for one -- an auto-starting ``meshctl``
with backoff (5, 10, 20 ... 250 ms between tries), the benchmark's prober every
half millisecond -- and notices the daemon up to a backoff step late. A socket that
exists lets it connect at once and wait in the listen backlog for its answer. So
``meshd run`` resolves the paths, reads the config, takes the profile lock and binds
(or adopts) the socket here, with little more than the standard library and msgspec
loaded, ~15 ms after exec; only then does it import :mod:`meshd.app` (the store,
the handlers, anyio: ~70 ms) and restore. Nothing is accepted before the restore
is done (:meth:`meshd.app.Daemon.run`), so no request is read early.

The order, and each refusal, is as it was: the event loop choice, the paths and
config, the profile lock, the socket (a live daemon's, or a file, is never taken);
the database is opened later and a failure there removes the socket again.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from meshd import config, sdnotify, singleton
from meshd.paths import (
    PathError,
    ProfilePaths,
    check_socket_length,
    ensure_private_dir,
    ensure_socket_dir,
)
from meshd.server import eventloop, socketfile

if TYPE_CHECKING:
    from meshd.core.settings import Settings


class StartupError(Exception):
    """meshd cannot start; the message says why and what to do."""


def prepare(profile: str) -> tuple[ProfilePaths, Settings, int]:
    """Paths, config and the profile lock: everything that can refuse to start before
    the socket is bound."""
    try:
        paths = ProfilePaths.resolve(profile)
        settings = config.load(paths.config, profile)
        ensure_private_dir(paths.state)
        if not os.environ.get("LISTEN_FDS"):
            ensure_socket_dir(paths.socket.parent)
            check_socket_length(paths.socket)
    except (PathError, config.ConfigError) as exc:
        raise StartupError(str(exc)) from exc
    try:
        lock_fd = singleton.acquire(paths.lock, paths.socket, paths.socket_record)
    except singleton.AlreadyRunning as exc:
        raise StartupError(str(exc)) from exc
    except OSError as exc:
        raise StartupError(f"cannot take the profile lock {paths.lock}: {exc.strerror}") from exc
    return paths, settings, lock_fd


def record(paths: ProfilePaths, path: Path) -> int:
    """Record ``path`` as the socket clients reach (SPEC §2); its inode, by which the
    daemon later tells whether the path still holds its socket."""
    ino = path.stat().st_ino
    tmp = paths.socket_record.with_suffix(".socket.tmp")
    tmp.write_text(f"{path}\n")
    tmp.replace(paths.socket_record)
    return ino


class Listening:
    """The listening socket, bound by us or adopted from systemd, before any event loop."""

    def __init__(self, sock: socket.socket, path: Path, *, adopted: bool, ino: int | None):
        self.sock = sock
        self.path = path
        """The socket's path (the profile's, or the one systemd bound)."""
        self.adopted = adopted
        """Passed by systemd: systemd's to remove, never ours."""
        self.ino = ino
        """Its inode when it was bound (None: an adopted socket without a path)."""

    def discard(self, paths: ProfilePaths) -> None:
        """Close it and remove the socket file if it is still ours (a start that failed)."""
        self.sock.close()
        if self.adopted or self.ino is None:
            return
        try:
            if self.path.stat().st_ino == self.ino:
                self.path.unlink()
                paths.socket_record.unlink(missing_ok=True)
        except OSError:
            pass


def listen(paths: ProfilePaths) -> Listening:
    """Adopt the socket systemd passed, or bind the profile's path if it is free."""
    adopted = sdnotify.listen_fds()
    if adopted:
        sock = adopted[0]
        name = sock.getsockname()
        if isinstance(name, str) and name:
            return Listening(sock, Path(name), adopted=True, ino=record(paths, Path(name)))
        return Listening(sock, paths.socket, adopted=True, ino=None)
    path = paths.socket
    problem = socketfile.occupant(path)
    if problem is not None:
        raise StartupError(f"cannot listen on {path}: {problem}")
    try:
        sock = socketfile.listen_now(path)
    except OSError as exc:
        raise StartupError(f"cannot listen on {path}: {exc.strerror or exc}") from exc
    try:
        ino = record(paths, path)
    except BaseException:
        sock.close()
        path.unlink(missing_ok=True)
        raise
    return Listening(sock, path, adopted=False, ino=ino)


class Begun:
    """A start that nothing refused: the loop to run, the profile's paths and settings,
    its lock (held for the life of the process) and its listening socket."""

    def __init__(self, profile: str) -> None:
        try:
            self.loop = eventloop.choose()
        except eventloop.LoopChoiceError as exc:
            raise StartupError(str(exc)) from exc
        self.paths, self.settings, self.lock_fd = prepare(profile)
        self.listening = listen(self.paths)
