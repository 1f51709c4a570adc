"""The daemon's config file, found and checked with the daemon's own code.

The administration commands (doctor, fleet join/leave/status, import) read or edit
the file the daemon reads. A second finder or loader would drift from the daemon's,
they borrow :mod:`meshd.paths` and :mod:`meshd.config`: the only daemon modules
beyond the contract that the command line imports, and only in ``cli/admin/`` (they
load the pure core and platformdirs, never the store or the server).
"""

from __future__ import annotations

from pathlib import Path


def config_file() -> Path:
    """The config file the daemon reads (``MESH_CONFIG`` overrides)."""
    from meshd.paths import config_file

    return config_file()


def problem(path: Path, profile: str) -> str | None:
    """What the daemon's loader refuses in the config file at ``path`` for ``profile``,
    or None when it loads."""
    from meshd.config import ConfigError, load

    try:
        load(path, profile)
    except ConfigError as exc:
        return str(exc)
    return None
