"""Where a profile's socket, database, lock and config live (SPEC §2).

The daemon resolves folders with platformdirs; ``meshctl._paths`` mirrors the
same rules with the standard library alone (a test keeps the two in step), and
the daemon records the socket it serves in ``<state>/<profile>.socket`` so a
client whose environment differs (cron without ``XDG_RUNTIME_DIR``) still finds it.
"""

from __future__ import annotations

import os
import stat
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from meshd.protocol import contract, trust

APP = "meshd"
# sun_path is 108 bytes on Linux and 104 on macOS, NUL included.
SUN_PATH_MAX = 104 if sys.platform == "darwin" else 108


class PathError(Exception):
    """A path is unusable; the message says what to change."""


def check_profile(name: str) -> str:
    """Return ``name`` if it is a valid profile name, else raise :class:`PathError`."""
    try:
        return contract.check_profile(name)
    except ValueError as exc:
        raise PathError(str(exc)) from None


def _runtime_dir() -> Path:
    import platformdirs

    # platformdirs warns (RuntimeDirWarning) when XDG_RUNTIME_DIR is unset, as in
    # cron; the fallback it picks is right, so the warning is only noise here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return Path(platformdirs.user_runtime_dir(APP, ensure_exists=False))
        except OSError as exc:  # e.g. the tempdir fallback is owned by another user
            raise PathError(str(exc)) from None


def _absolute(path: str, name: str, what: str) -> str:
    """``path`` if absolute, else :class:`PathError`: relative, it would be resolved
    against the daemon's working folder (``/`` when auto-started), and against
    meshctl's own elsewhere, splitting the profile in two."""
    try:
        return trust.check_absolute(path, name, what)
    except ValueError as exc:
        raise PathError(str(exc)) from None


def state_dir() -> Path:
    """The folder of databases, locks and daemon logs."""
    if env := os.environ.get("MESH_STATE_DIR"):
        return Path(_absolute(env, "MESH_STATE_DIR", "state folder"))
    import platformdirs

    return Path(platformdirs.user_state_dir(APP))


def config_file() -> Path:
    """The config file (``MESH_CONFIG`` overrides)."""
    if env := os.environ.get("MESH_CONFIG"):
        return Path(_absolute(env, "MESH_CONFIG", "config file"))
    import platformdirs

    return Path(platformdirs.user_config_dir(APP)) / "config.toml"


def socket_path(profile: str) -> Path:
    """The socket a profile's daemon serves (``MESH_SOCKET`` overrides; it must be absolute:
    a relative one would bind in the daemon's working folder, ``/`` when auto-started)."""
    if env := os.environ.get("MESH_SOCKET"):
        try:
            return Path(trust.check_absolute(env))
        except ValueError as exc:
            raise PathError(str(exc)) from None
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
        sock = socket_path(profile)
        config = config_file()
        for path, var, what in (
            (sock, "MESH_SOCKET", "socket"),
            (state, "MESH_STATE_DIR", "state folder"),
            (config, "MESH_CONFIG", "config file"),
        ):
            _check_utf8(path, var, what)
        return cls(
            profile=profile,
            socket=sock,
            state=state,
            database=state / f"{profile}.sqlite3",
            lock=state / f"{profile}.lock",
            socket_record=state / f"{profile}.socket",
            config=config,
            log=state / f"{profile}.log",
        )


def _check_utf8(path: Path, var: str, what: str) -> None:
    """Refuse a path whose name is not UTF-8 (from ``XDG_RUNTIME_DIR``, ``HOME`` …; the
    overrides themselves are refused by :func:`trust.check_absolute` with their name):
    the daemon records and reports its paths as text, and SQLite takes its file name as
    UTF-8, so such a path failed the start with a traceback."""
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise PathError(
            f"the {what} path '{contract.escaped(text)}' is not valid UTF-8 (the daemon "
            f"records and reports its paths as text); set {var} to a path whose name is UTF-8"
        ) from None


def check_socket_length(path: Path) -> None:
    """Refuse a socket path that does not fit in ``sun_path`` (nor its temporary name,
    which is a few bytes longer: the socket is bound there, then renamed into place)."""
    from meshd.server.socketfile import temp_path

    size = len(os.fsencode(temp_path(path)))
    if size >= SUN_PATH_MAX:
        raise PathError(
            f"socket path is {len(os.fsencode(path))} bytes ({size} while it is bound under a "
            f"temporary name), over the {SUN_PATH_MAX - 1}-byte limit of Unix sockets: "
            f"{path}; set MESH_SOCKET to a shorter path"
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
            f"{path} is owned by {trust.who(info.st_uid)}, not {trust.who(os.geteuid())}: "
            f"use a folder of your own (MESH_SOCKET / MESH_STATE_DIR)"
        )
    # A folder others can write lets them replace the socket or the database.
    if stat.S_IMODE(info.st_mode) & 0o022:
        raise PathError(
            f"{path} is writable by other users (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"run: chmod 0700 '{path}'"
        )


def ensure_socket_dir(path: Path) -> None:
    """Create the socket's folder with mode 0700, or check an existing one is private.

    Stricter than the state folder: a real folder (no symlink), ours, mode 0700, the
    rule clients check before they connect (:mod:`meshd.protocol.trust`).
    """
    try:
        problem = trust.folder_problem(os.fspath(path))
    except FileNotFoundError:
        try:
            path.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            pass  # made meanwhile (another daemon, a client): checked below
        except OSError as exc:
            raise PathError(f"cannot create the socket folder {path}: {exc.strerror}") from exc
        problem = trust.folder_problem(os.fspath(path))
    except OSError as exc:
        raise PathError(f"cannot check the socket folder {path}: {exc.strerror}") from exc
    if problem is not None:
        raise PathError(problem)
