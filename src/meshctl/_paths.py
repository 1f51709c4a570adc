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

Each rule is computed on plain strings (``*_str``), which is what the connect path
uses: :mod:`pathlib` costs milliseconds to import (it pulls in ``urllib.parse``,
``ipaddress`` …), on the start-up path of every ``meshctl`` command. The public
functions return :class:`~pathlib.Path`, as :mod:`meshd.paths` does, and import it
when called.
"""

from __future__ import annotations

import os
import stat
import sys

from meshctl._core import env as _env
from meshd.protocol import contract
from meshd.protocol.trust import check_absolute, env_path_problem

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from pathlib import Path

APP = "meshd"
_PRIVATE = 0o700


def _ancestors(path: str) -> list[str]:
    """``path`` and each folder above it, up to ``/`` (``Path.parents`` without pathlib)."""
    out = [path]
    while (parent := os.path.dirname(out[-1])) != out[-1]:
        out.append(parent)
    return out


def _parents_safe(path: str) -> bool:
    """Whether every existing ancestor of ``path`` is owned by root or us and not writable
    by others (unless sticky), as platformdirs' ``runtime_dir_parent_problem`` requires."""
    owners = {0, os.geteuid()}
    for entry in _ancestors(os.path.realpath(os.path.dirname(path))):
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
    import tempfile  # rare (no usable runtime folder): kept off the CLI's start-up path

    return os.path.join(tempfile.gettempdir(), f"runtime-{os.geteuid()}")


def runtime_dir_str() -> str:
    """:func:`runtime_dir` as a string."""
    xdg = _env.get("XDG_RUNTIME_DIR")
    if os.path.isabs(xdg) and _xdg_runtime_ok(xdg):
        return os.path.join(xdg, APP)
    if sys.platform == "darwin":
        return os.path.join(os.path.expanduser("~/Library/Caches/TemporaryItems"), APP)
    return os.path.join(_fallback_runtime_base(), APP)


def runtime_dir() -> Path:
    """The folder holding every profile's socket (no ``MESH_SOCKET`` applied)."""
    from pathlib import Path

    return Path(runtime_dir_str())


def socket_path_str(profile: str) -> str:
    """:func:`socket_path` as a string (a relative ``MESH_SOCKET`` raises ValueError)."""
    if env := _env.get("MESH_SOCKET"):
        return check_absolute(env)
    return os.path.join(runtime_dir_str(), f"{profile}.sock")


def socket_arg(explicit: str | os.PathLike[str] | None, env: str | None = None) -> str | None:
    """The socket a client was given (argument, else ``env``: the ``MESH_SOCKET`` it read
    when it was made, else now), checked absolute."""
    if explicit:
        return check_absolute(os.fspath(explicit), "socket")
    if env := _env.get("MESH_SOCKET") if env is None else env:
        return check_absolute(env)
    return None


def client_target(
    profile: str | None, socket: str | os.PathLike[str] | None, autostart: bool
) -> tuple[str, str | None]:
    """Where a new client (``Mesh``, ``AsyncMesh``) goes, the environment read once for
    it: the profile (the argument, else ``MESH_PROFILE``, else ``default``; checked) and
    the socket (the argument, else ``MESH_SOCKET``; checked absolute). A client that
    may start the daemon refuses unsafe state and config overrides now."""
    env = _env.Environment.read()
    checked = contract.check_profile(profile or env.profile or "default")
    path = socket_arg(socket, env.socket)
    if autostart:
        check_overrides()
    return checked, path


def check_overrides() -> None:
    """Raise ValueError when ``MESH_STATE_DIR`` or ``MESH_CONFIG`` is relative (as for
    ``MESH_SOCKET``): said when a client that may start a daemon is made, not at its
    first start. A client that never starts one (``autostart=False``: the Hermes
    plugin) reads the state folder only for the recorded socket, and a relative one
    there finds none, which is harmless; it is not refused."""
    if problem := env_path_problem():
        raise ValueError(problem)


def socket_path(profile: str) -> Path:
    """The socket a profile's daemon serves (``MESH_SOCKET`` overrides)."""
    from pathlib import Path

    return Path(socket_path_str(profile))


def state_dir_str() -> str:
    """:func:`state_dir` as a string."""
    if env := _env.get("MESH_STATE_DIR"):
        return env  # a relative one: refused by check_overrides where it matters
    xdg = _env.get("XDG_STATE_HOME")
    if os.path.isabs(xdg):
        return os.path.join(xdg, APP)
    if sys.platform == "darwin":
        return os.path.join(os.path.expanduser("~/Library/Application Support"), APP)
    return os.path.join(os.path.expanduser("~/.local/state"), APP)


def state_dir() -> Path:
    """The folder of databases, locks, daemon logs and recorded socket paths."""
    from pathlib import Path

    return Path(state_dir_str())


def recorded_socket_str(profile: str) -> str | None:
    """:func:`recorded_socket` as a string."""
    try:
        with open(os.path.join(state_dir_str(), f"{profile}.socket"), encoding="utf-8") as recorded:
            text = recorded.read()
    except (OSError, UnicodeDecodeError):
        return None
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line if line and os.path.isabs(line) else None


def recorded_socket(profile: str) -> Path | None:
    """The socket path the profile's daemon recorded in the state folder, if any."""
    from pathlib import Path

    found = recorded_socket_str(profile)
    return None if found is None else Path(found)


def spawn_lock(profile: str) -> Path:
    """The lock that makes racing clients start one daemon, not several."""
    return state_dir() / f"{profile}.spawn.lock"


def log_file(profile: str) -> Path:
    """Where a daemon started by a client writes its output."""
    return state_dir() / f"{profile}.log"
