"""Where a profile's socket, database, lock and config live (SPEC §2).

The daemon resolves folders with platformdirs; ``meshctl._paths`` mirrors the
same rules with the standard library alone (a test keeps the two in step), and
the daemon records the socket it serves in ``<state>/<profile>.socket`` so a
client whose environment differs (cron without ``XDG_RUNTIME_DIR``) still finds it.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

PROFILE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
APP = "meshd"
# sun_path is 108 bytes on Linux and 104 on macOS, NUL included.
SUN_PATH_MAX = 104 if sys.platform == "darwin" else 108


class PathError(Exception):
    """A path is unusable; the message says what to change."""


def check_profile(name: str) -> str:
    """Return ``name`` if it is a valid profile name, else raise :class:`PathError`."""
    if not PROFILE_RE.match(name) or name in {".", ".."}:
        raise PathError(
            f"invalid profile name {name!r}: use 1-64 characters from A-Z a-z 0-9 _ . -"
        )
    return name


def _runtime_dir() -> Path:
    import platformdirs

    # platformdirs warns (RuntimeDirWarning) when XDG_RUNTIME_DIR is unset, as in
    # cron; the fallback it picks is right, so the warning is only noise here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Path(platformdirs.user_runtime_dir(APP, ensure_exists=False))


def state_dir() -> Path:
    """The folder of databases, locks and daemon logs."""
    if env := os.environ.get("MESH_STATE_DIR"):
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_state_dir(APP))


def config_file() -> Path:
    """The config file (``MESH_CONFIG`` overrides)."""
    if env := os.environ.get("MESH_CONFIG"):
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_config_dir(APP)) / "config.toml"


def socket_path(profile: str) -> Path:
    """The socket a profile's daemon serves (``MESH_SOCKET`` overrides)."""
    if env := os.environ.get("MESH_SOCKET"):
        return Path(env)
    return _runtime_dir() / f"{profile}.sock"


@dataclass(frozen=True)
class ProfilePaths:
    """Every path one profile's daemon uses."""

    profile: str
    socket: Path
    state: Path
    database: Path
    lock: Path
    socket_record: Path
    config: Path
    log: Path

    @classmethod
    def resolve(cls, profile: str) -> ProfilePaths:
        check_profile(profile)
        state = state_dir()
        return cls(
            profile=profile,
            socket=socket_path(profile),
            state=state,
            database=state / f"{profile}.sqlite3",
            lock=state / f"{profile}.lock",
            socket_record=state / f"{profile}.socket",
            config=config_file(),
            log=state / f"{profile}.log",
        )


def check_socket_length(path: Path) -> None:
    """Refuse a socket path that does not fit in ``sun_path``."""
    if len(os.fsencode(path)) >= SUN_PATH_MAX:
        raise PathError(
            f"socket path is {len(os.fsencode(path))} bytes, over the {SUN_PATH_MAX - 1}-byte "
            f"limit of Unix sockets: {path}\n  set MESH_SOCKET to a shorter path"
        )


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` with mode 0700, or check an existing one is ours and not writable by others.

    Like watchman's ``verify_dir_ownership``: refuse loudly and print the fix.
    """
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise PathError(f"cannot create {path}: {exc.strerror}") from exc
    info = path.stat()
    if info.st_uid != os.geteuid():
        raise PathError(
            f"{path} is owned by uid {info.st_uid}, not {os.geteuid()}: "
            f"use a folder of your own (MESH_SOCKET / MESH_STATE_DIR)"
        )
    # A folder others can write lets them replace the socket or the database.
    if stat.S_IMODE(info.st_mode) & 0o022:
        raise PathError(
            f"{path} is writable by other users (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"run: chmod 0700 '{path}'"
        )
