"""One daemon per profile: an exclusive ``flock`` beside the database (SPEC §2).

The lock is held for the daemon's whole life and the kernel drops it even after
``kill -9``. Only the lock holder may unlink or bind the profile's socket:
anyio's ``create_unix_listener`` unlinks whatever is at the path, so without
this lock a second daemon would silently take the socket from the first.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class AlreadyRunning(Exception):
    """Another daemon holds the profile's lock."""


def acquire(lock_path: Path, socket_path: Path, record: Path | None = None) -> int:
    """Take the lock or raise :class:`AlreadyRunning`; returns the fd to keep open.

    ``record``: where the running daemon records the socket it serves. When that is
    not ``socket_path`` (``MESH_SOCKET`` points elsewhere, or the running one was
    started with it), the refusal names the socket the running daemon serves and
    what to set, instead of calling ``socket_path`` its socket."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise AlreadyRunning(_refusal(holder, lock_path, socket_path, record)) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _refusal(holder: str, lock_path: Path, socket_path: Path, record: Path | None) -> str:
    served = _served(record)
    if served is None or served == str(socket_path):
        return (
            f"another meshd (pid {holder}) already serves this profile "
            f"(lock {lock_path}, socket {socket_path}); not starting a second one"
        )
    given = os.environ.get("MESH_SOCKET")
    why = "MESH_SOCKET" if given else "this profile's default socket"
    fix = f"to reach it, set MESH_SOCKET={served}" + (" or unset MESH_SOCKET" if given else "")
    return (
        f"another meshd (pid {holder}) already serves this profile on {served} "
        f"(lock {lock_path}), not on {socket_path} ({why}); {fix}. "
        "Not starting a second one"
    )


def _served(record: Path | None) -> str | None:
    """The socket the running daemon recorded (None when unreadable)."""
    if record is None:
        return None
    try:
        return record.read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None
