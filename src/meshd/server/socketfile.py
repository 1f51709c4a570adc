"""The socket file: what is at its path, and how it is (re)bound without a gap.

Two rules, applied at start-up and by the socket guard alike:

* **Replace only what is free.** Nothing at the path, or a socket nobody listens on
  (left by a daemon killed with ``kill -9``), may be replaced. A socket someone
  listens on belongs to another live daemon (two profiles given one
  ``MESH_SOCKET``): never taken. A file, a folder or a symlink is not ours to
  delete. :func:`occupant` says which, in one sentence.
* **Bind atomically** (:func:`bind`): listen at a temporary name in the same
  folder, then ``rename`` it over the path. A client never finds the path missing
  or refusing connections in between (it would take that for "no daemon" and
  start a second one), and a stale socket is replaced in one step. anyio's
  ``create_unix_listener`` would instead unlink whatever socket is at the path,
  live or not.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from meshd.protocol.trust import peer_credentials

if TYPE_CHECKING:
    from anyio.abc import SocketListener

BACKLOG = 65536
"""Connections that may wait to be accepted (anyio's largest); a client that
connects during the restore waits here (see :class:`meshd.app.Daemon`)."""
PROBE_TIMEOUT = 1.0
"""Seconds a probe waits to connect to a socket found at the path."""
_FREE = (errno.ECONNREFUSED, errno.ENOENT)
"""A socket nobody listens on (or one removed while we looked): free to replace."""


def temp_path(path: Path) -> Path:
    """The name a socket is bound at before it is renamed to ``path`` (same folder)."""
    return path.with_name(f".{path.name}.{os.getpid()}")


def occupant(path: Path) -> str | None:
    """Why ``path`` may not be replaced by our socket, or None when it is free.

    Blocking (it may connect, for at most :data:`PROBE_TIMEOUT`): the guard calls it
    in a worker thread.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symlink (to {os.readlink(path)}), not a socket: remove it"
    if stat.S_ISDIR(info.st_mode):
        return f"{path} is a folder, not a socket: remove it, or set MESH_SOCKET elsewhere"
    if not stat.S_ISSOCK(info.st_mode):
        return f"{path} is a file, not a socket: remove it, or set MESH_SOCKET elsewhere"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(PROBE_TIMEOUT)
        try:
            probe.connect(os.fspath(path))
        except OSError as exc:
            if exc.errno in _FREE:
                return None
            return (
                f"cannot tell whether {path} is in use ({exc.strerror or exc}): "
                "remove it if no meshd serves it"
            )
        pid, _uid = peer_credentials(probe)
    return (
        f"another meshd (pid {pid}) serves {path}: give each profile its own MESH_SOCKET"
        if pid
        else f"another process serves {path}: give each profile its own MESH_SOCKET"
    )


def _listen(path: Path) -> socket.socket:
    """A listening socket at ``path``, mode 0600 (blocking: a bind and a chmod)."""
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        raw.setblocking(False)
        raw.bind(os.fspath(path))
        os.chmod(path, 0o600)
        raw.listen(BACKLOG)
    except BaseException:
        raw.close()
        raise
    return raw


def listen_now(path: Path) -> socket.socket:
    """Listen at ``path`` (mode 0600), replacing a stale socket there in one rename.

    Blocking, and without anyio: at start-up, before the event loop and the
    daemon's own modules (:mod:`meshd.startup`). The socket is wrapped for the loop
    later (``SocketListener.from_socket``).
    """
    tmp = temp_path(path)
    tmp.unlink(missing_ok=True)
    raw = _listen(tmp)
    try:
        os.rename(tmp, path)
    except BaseException:
        raw.close()
        tmp.unlink(missing_ok=True)
        raise
    return raw


async def bind(path: Path) -> SocketListener:
    """:func:`listen_now` from the event loop, its blocking part in a worker thread."""
    import anyio
    from anyio.abc import SocketListener

    raw = await anyio.to_thread.run_sync(listen_now, path)
    return await SocketListener.from_socket(raw)
