"""The daemon's config file, found and checked with the daemon's own code.

The administration commands (doctor, fleet join/leave/status, import) read or edit
the file the daemon reads. A second finder or loader would drift from the daemon's,
they borrow :mod:`meshd.paths` and :mod:`meshd.config`: the only daemon modules
beyond the contract that the command line imports, and only in ``cli/admin/`` (they
load the pure core and platformdirs, never the store or the server). A
``[profiles.NAME]`` table naming no profile here is found here too, for ``doctor``
and ``daemon reload`` alike.
"""

from __future__ import annotations

import contextlib
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


def unused_profile_tables(
    config: Path, profile: str, state_dir: Path, socket_dir: Path
) -> str | None:
    """A ``[profiles.NAME]`` table whose NAME no profile here uses (a typo, most likely:
    ``[profiles.wrok]`` is valid TOML and a valid name, and would be ignored silently),
    said with the closest used name; None when every table is used. A profile is used
    when it has a database in the state folder or a socket in ``socket_dir``, or is
    ``profile``. ``doctor`` and ``daemon reload`` say it."""
    import difflib
    import tomllib

    try:
        tables = tomllib.loads(config.read_text(encoding="utf-8")).get("profiles") or {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    if not isinstance(tables, dict):
        return None
    used = {profile}
    for folder, suffix in ((state_dir, ".sqlite3"), (socket_dir, ".sock")):
        with contextlib.suppress(OSError):
            used |= {p.name.removesuffix(suffix) for p in folder.glob(f"*{suffix}")}
    unused = sorted(name for name in tables if name not in used)
    if not unused:
        return None
    names = ", ".join(f"[profiles.{n}]" for n in unused)
    guesses = [g for n in unused for g in difflib.get_close_matches(n, sorted(used), n=1)]
    mean = f"; did you mean {', '.join(guesses)}?" if guesses else ""
    return f"{names} names no profile used here (used: {', '.join(sorted(used))}){mean}"
