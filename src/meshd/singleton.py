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


def acquire(lock_path: Path, socket_path: Path) -> int:
    """Take the lock or raise :class:`AlreadyRunning`; returns the fd to keep open."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise AlreadyRunning(
            f"another meshd (pid {holder}) already serves this profile "
            f"(lock {lock_path}, socket {socket_path}); not starting a second one"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
