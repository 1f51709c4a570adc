"""Where the client looks for a profile's socket and state: the standard library only.

This mirrors :mod:`meshd.paths` (which asks platformdirs) so that ``import meshctl``
never loads platformdirs; ``tests/test_paths_agree.py`` keeps the two in step.
The rules, as platformdirs (>= 4.12) applies them with ``ensure_exists=False``:

* Linux runtime folder: ``$XDG_RUNTIME_DIR`` if it is absolute, sits below parents no
  other user can replace, and is missing or a real directory (not a symlink) owned by
  the effective uid with mode 0700; else ``/run/user/<uid>`` if it exists and passes
  the same check; else ``<tempdir>/runtime-<uid>``. Then ``meshd/<profile>.sock``.
* macOS runtime folder: ``~/Library/Caches/TemporaryItems/meshd`` (``XDG_RUNTIME_DIR``
  is honoured there too, under the same check).
* State folder: ``MESH_STATE_DIR``, else ``$XDG_STATE_HOME/meshd``, else
  ``~/.local/state/meshd`` (macOS: ``~/Library/Application Support/meshd``).

The daemon writes the socket it serves into ``<state>/<profile>.socket``;
:func:`recorded_socket` reads it back, for clients (cron) whose environment differs.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import tempfile
from pathlib import Path

APP = "meshd"
_PROFILE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_PRIVATE = 0o700


def check_profile(name: str) -> str:
    """Return ``name`` if it is a valid profile name, else raise :class:`ValueError`."""
    if not _PROFILE_RE.match(name) or name in {".", ".."}:
        raise ValueError(
            f"invalid profile name {name!r}: use 1-64 characters from A-Z a-z 0-9 _ . -"
        )
    return name


def _parents_safe(path: str) -> bool:
    """Whether every existing ancestor of ``path`` is owned by root or us and not writable
    by others (unless sticky), as platformdirs' ``runtime_dir_parent_problem`` requires."""
    owners = {0, os.geteuid()}
    current = Path(os.path.realpath(os.path.dirname(path)))
    for entry in (current, *current.parents):
        try:
            info = os.stat(entry)
        except FileNotFoundError:
            continue
        except OSError:
            return False
        if info.st_uid not in owners or not stat.S_ISDIR(info.st_mode):
            return False
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
            return False
    return True


def _private_dir(path: str, *, missing_ok: bool) -> bool:
    """A real directory (no symlink) owned by the effective uid with mode 0700."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return missing_ok
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.geteuid()
        and stat.S_IMODE(info.st_mode) == _PRIVATE
    )


def _xdg_runtime_ok(path: str) -> bool:
    if not _parents_safe(path):
        return False
    return _private_dir(path, missing_ok=True)


def _fallback_runtime_base() -> str:
    path = f"/run/user/{os.geteuid()}"
    if _parents_safe(path) and _private_dir(path, missing_ok=False):
        return path
    return os.path.join(tempfile.gettempdir(), f"runtime-{os.geteuid()}")


def runtime_dir() -> Path:
    """The folder holding every profile's socket (no ``MESH_SOCKET`` applied)."""
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(xdg) and _xdg_runtime_ok(xdg):
        return Path(xdg, APP)
    if sys.platform == "darwin":
        return Path(os.path.expanduser("~/Library/Caches/TemporaryItems"), APP)
    return Path(_fallback_runtime_base(), APP)


def socket_path(profile: str) -> Path:
    """The socket a profile's daemon serves (``MESH_SOCKET`` overrides)."""
    if env := os.environ.get("MESH_SOCKET"):
        return Path(env)
    return runtime_dir() / f"{profile}.sock"


def state_dir() -> Path:
    """The folder of databases, locks, daemon logs and recorded socket paths."""
    if env := os.environ.get("MESH_STATE_DIR"):
        return Path(env)
    xdg = os.environ.get("XDG_STATE_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg, APP)
    if sys.platform == "darwin":
        return Path(os.path.expanduser("~/Library/Application Support"), APP)
    return Path(os.path.expanduser("~/.local/state"), APP)


def recorded_socket(profile: str) -> Path | None:
    """The socket path the profile's daemon recorded in the state folder, if any."""
    try:
        text = (state_dir() / f"{profile}.socket").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return Path(line) if line and os.path.isabs(line) else None


def spawn_lock(profile: str) -> Path:
    """The lock that makes racing clients start one daemon, not several."""
    return state_dir() / f"{profile}.spawn.lock"


def log_file(profile: str) -> Path:
    """Where a daemon started by a client writes its output."""
    return state_dir() / f"{profile}.log"
