"""The checks behind ``meshctl doctor``: what works, and the command that fixes what does not.

Each check returns one :class:`Check` with a status (``ok``, ``info``, ``warn``,
``fail``, ``skip``), one sentence, and, when something is wrong, the command to run. Checks
look, they never change anything and never start a daemon. The config check loads
the file *now*, in this process, with the daemon's own loader, so its error is the
one of this load (a daemon's log holds older ones).

``info`` is for a state that is normal but worth knowing: no daemon runs yet (the
first command that needs one starts it, SPEC §9), as on a fresh install. ``warn`` is
for what works but may surprise (no service installed, no ``XDG_RUNTIME_DIR`` in this
environment); only ``fail`` makes doctor exit 1.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from meshctl._core import env as _env
from meshctl.cli.admin.config import unused_profile_tables
from meshd import __version__
from meshd.protocol.contract import SCHEMA_VERSION

Status = Literal["ok", "info", "warn", "fail", "skip"]


@dataclass
class Check:
    name: str
    status: Status
    message: str
    fix: str | None = None


@dataclass
class Context:
    """What the checks share: the profile, its paths, and the daemon's answer (if any)."""

    profile: str
    socket: Path
    state_dir: Path
    config: Path
    info: dict[str, Any] | None = None
    info_error: str | None = None
    absent: bool = False
    """No daemon runs (nothing listens at the socket): one is started on demand. False
    when one is there but cannot be used (untrusted socket, no answer, other profile)."""
    fleet: dict[str, Any] | None = None
    """The daemon's ``fleet.status`` (None: no daemon, or one older than the fleet)."""


def _mode(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))[2:].rjust(4, "0")


def check_daemon(ctx: Context) -> Check:
    if ctx.info is not None:
        return Check(
            "daemon",
            "ok",
            f"meshd {ctx.info.get('version')} answers on {ctx.socket} (pid {ctx.info.get('pid')})",
        )
    if ctx.absent:
        # A fresh install, or after `daemon stop`: not a fault. Whatever would keep a
        # started daemon from running (config, state folder, socket folder) fails its
        # own check below.
        return Check(
            "daemon",
            "info",
            f"no daemon runs yet for profile {ctx.profile} ({ctx.socket}); the first command "
            f"that needs one starts it (or: meshctl daemon start --profile {ctx.profile})",
        )
    why = ctx.info_error or ""
    detail = f": {why}" if why else ""
    return Check(
        "daemon",
        "fail",
        f"no daemon answers on {ctx.socket}{detail}",
        f"meshctl daemon start --profile {ctx.profile}",
    )


def check_version(ctx: Context) -> Check:
    if ctx.info is None:
        return Check("version", "skip", "no daemon to compare with")
    theirs = ctx.info.get("version")
    if theirs == __version__:
        return Check("version", "ok", f"client and daemon are both {__version__}")
    return Check(
        "version",
        "fail",
        f"this client is {__version__} but the daemon runs {theirs} (started before an upgrade)",
        f"meshctl daemon restart --profile {ctx.profile}",
    )


def check_socket(ctx: Context) -> Check:
    """Socket 0600 in a 0700 folder, both ours, neither a symlink (SPEC §2)."""
    folder = ctx.socket.parent
    problems: list[str] = []
    fixes: list[str] = []
    if folder.is_symlink():
        problems.append(f"{folder} is a symlink")
        fixes.append(f"rm {folder}  # a daemon re-creates it as a private folder")
    elif folder.is_dir():
        st = folder.stat()
        if st.st_uid != os.getuid():
            problems.append(f"{folder} belongs to uid {st.st_uid}, not you ({os.getuid()})")
            fixes.append(f"use a folder of your own: export MESH_SOCKET=... (not under {folder})")
        elif stat.S_IMODE(st.st_mode) != 0o700:
            problems.append(f"{folder} has mode {_mode(folder)}, not 0700")
            fixes.append(f"chmod 0700 '{folder}'")
    else:
        return Check("socket", "ok", f"{folder} does not exist yet (created at first start)")
    if ctx.socket.exists() and not ctx.socket.is_socket():
        problems.append(f"{ctx.socket} is not a socket")
        fixes.append(f"rm '{ctx.socket}'")
    elif ctx.socket.is_socket():
        st = ctx.socket.lstat()
        if st.st_uid != os.getuid():
            problems.append(f"{ctx.socket} belongs to uid {st.st_uid}")
    if problems:
        return Check("socket", "fail", "; ".join(problems), "; ".join(fixes) or None)
    return Check("socket", "ok", f"{ctx.socket} (folder 0700, yours)")


def check_runtime(ctx: Context) -> Check:
    """Cron jobs lack XDG_RUNTIME_DIR: they find the socket through the state folder."""
    record = ctx.state_dir / f"{ctx.profile}.socket"
    recorded = record.read_text(encoding="utf-8").strip() if record.is_file() else None
    if _env.get("XDG_RUNTIME_DIR") or _env.get("MESH_SOCKET"):
        extra = f"; the daemon recorded {recorded}" if recorded else ""
        return Check("runtime", "ok", f"socket path known in this environment{extra}")
    if recorded:
        return Check(
            "runtime",
            "ok",
            f"XDG_RUNTIME_DIR is unset here (as in cron); clients find the recorded socket "
            f"{recorded}",
        )
    return Check(
        "runtime",
        "warn",
        "XDG_RUNTIME_DIR is unset and no daemon has recorded its socket yet",
        "start the daemon once from a login shell, or set MESH_SOCKET in the crontab",
    )


def check_config(ctx: Context) -> Check:
    from meshd.config import ConfigError, load

    if not ctx.config.exists():
        return Check("config", "ok", f"no {ctx.config}: all defaults")
    try:
        settings = load(ctx.config, ctx.profile)
    except ConfigError as exc:
        return Check("config", "fail", str(exc), f"fix {ctx.config}, then: meshctl daemon reload")
    off = "" if settings.enabled else " (enabled = false: the mesh is switched off)"
    if unused := _unused_profile_tables(ctx):
        return unused
    if settings.heartbeat_interval >= settings.stale_after:
        # valid (SPEC §2 sets no order), but every session that heartbeats as told is
        # shown stale for part of each interval
        told, stale = f"{settings.heartbeat_interval:g}", f"{settings.stale_after:g}"
        return Check(
            "config",
            "warn",
            f"{ctx.config} is valid, but heartbeat_interval ({told} s) is not below "
            f"stale_after ({stale} s): a session heartbeating every {told} s, as it is "
            f"told to, shows as stale once {stale} s pass between two heartbeats{off}",
            f"raise stale_after well above heartbeat_interval (the defaults are 20 and 5) "
            f"in {ctx.config}, then: meshctl daemon reload",
        )
    return Check("config", "warn" if off else "ok", f"{ctx.config} is valid{off}")


def _unused_profile_tables(ctx: Context) -> Check | None:
    """:func:`unused_profile_tables` as doctor's config check."""
    said = unused_profile_tables(ctx.config, ctx.profile, ctx.state_dir, ctx.socket.parent)
    if said is None:
        return None
    return Check(
        "config",
        "warn",
        f"{ctx.config} is valid, but {said}",
        f"rename or remove the table in {ctx.config} (a new profile is used once a "
        "daemon ran for it)",
    )


def check_database(ctx: Context) -> Check:
    """Integrity, schema version and size, read-only (the daemon may be running)."""
    db = ctx.state_dir / f"{ctx.profile}.sqlite3"
    if not db.exists():
        return Check("database", "ok", f"{db} does not exist yet (created at first start)")
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=2.0)
        try:
            version = con.execute("PRAGMA user_version").fetchone()[0]
            result = con.execute("PRAGMA quick_check").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error as exc:
        return Check(
            "database",
            "fail",
            f"{db} cannot be read: {exc}",
            f"meshctl daemon stop --profile {ctx.profile}; mv '{db}' '{db}.broken'",
        )
    size = db.stat().st_size + _size(db.with_name(db.name + "-wal"))
    if result != "ok":
        return Check(
            "database",
            "fail",
            f"{db} failed its integrity check: {result}",
            f"meshctl daemon stop --profile {ctx.profile}; mv '{db}' '{db}.broken'",
        )
    if version > SCHEMA_VERSION:
        return Check(
            "database",
            "fail",
            f"{db} has schema {version}, newer than this meshd knows ({SCHEMA_VERSION})",
            "upgrade session-mesh, or move the file aside",
        )
    return Check("database", "ok", f"{db}: integrity ok, schema {version}, {size / 1e6:.1f} MB")


#: Below this much free space in the state folder, doctor fails: SQLite needs room to
#: grow its WAL, and a write it cannot make is refused (UNAVAILABLE).
MIN_FREE = 1 << 20
#: Below this much, doctor warns: a day of snapshots and messages can take it.
LOW_FREE = 64 << 20


def check_state(ctx: Context) -> Check:
    """The state folder can be written and has room (SPEC §8: a write the disk refuses
    is not acknowledged). Without this check a full disk or a read-only folder showed
    "All is well", and the daemon check's fix (start it) could not work."""
    folder = ctx.state_dir
    there = folder
    while not there.exists() and there != there.parent:
        there = there.parent  # created at the first start, under the nearest existing one
    fix_elsewhere = "or set MESH_STATE_DIR to a folder of your own on a writable disk"
    if not there.is_dir():
        return Check("state", "fail", f"{there} is not a folder", f"rm '{there}', {fix_elsewhere}")
    try:
        fs = os.statvfs(there)
    except OSError as exc:
        return Check("state", "fail", f"cannot look at {there}: {exc.strerror}", fix_elsewhere)
    if fs.f_flag & os.ST_RDONLY:
        why = "is on a read-only file system"
    elif not os.access(there, os.W_OK | os.X_OK):
        why = "is not writable by you"
    else:
        why = ""
    if why:
        where = f"{there} {why}" if there == folder else f"{folder} cannot be made: {there} {why}"
        return Check(
            "state",
            "fail",
            f"{where}: no database, lock or log can be written there",
            f"make it writable, {fix_elsewhere}",
        )
    free = fs.f_bavail * fs.f_frsize
    shown = f"{free / (1 << 30):.1f} GiB free" if free >= 1 << 30 else f"{free >> 20} MiB free"
    if free < MIN_FREE:
        return Check(
            "state",
            "fail",
            f"the disk of {folder} is full ({shown}): the daemon refuses every change it "
            "cannot store (UNAVAILABLE)",
            f"free space there (df -h '{there}'), {fix_elsewhere}",
        )
    if free < LOW_FREE:
        return Check(
            "state",
            "warn",
            f"the disk of {folder} is nearly full ({shown})",
            f"free space there (df -h '{there}')",
        )
    return Check("state", "ok", f"{folder} is writable, {shown}")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def check_service(ctx: Context) -> Check:
    from meshctl.cli.admin import service as _service

    manager = _service.default_manager()
    out = _service.status(ctx.profile, manager)
    if not out["installed"]:
        return Check(
            "service",
            "warn",
            f"no {manager} service installed (the daemon is started on demand instead)",
            f"meshctl service install --profile {ctx.profile}",
        )
    if not out["current"]:
        return Check(
            "service",
            "fail",
            f"the installed {manager} files are from another session-mesh version",
            f"meshctl service install --profile {ctx.profile}",
        )
    if out["reachable"] and not out["active"]:
        return Check(
            "service",
            "fail",
            f"the {manager} service is installed but not active",
            f"systemctl --user enable --now meshd@{ctx.profile}.socket"
            if manager == "systemd"
            else f"meshctl service install --profile {ctx.profile}",
        )
    if not out["reachable"]:
        # `service install` wrote the files and printed the commands to finish; until a
        # manager runs them nothing uses the files (the daemon starts on demand).
        finish = (
            f"systemctl --user daemon-reload && systemctl --user enable --now "
            f"meshd@{ctx.profile}.socket"
            if manager == "systemd"
            else f"meshctl service install --profile {ctx.profile}"
        )
        return Check(
            "service",
            "warn",
            f"{manager} service files installed, but the service manager does not answer "
            "here: not known to be enabled (the daemon is started on demand meanwhile)",
            finish,
        )
    return Check("service", "ok", f"{manager} service installed, active")


def check_fleet(ctx: Context) -> Check:
    """The fleet link (SPEC §12): :mod:`meshctl.cli.admin.fleet_doctor`."""
    from meshctl.cli.admin import fleet_doctor

    return Check("fleet", *fleet_doctor.check(ctx.fleet, ctx.info is not None, ctx.config))


def check_hermes(ctx: Context) -> Check:
    """Hermes Agent here: the meshd plugin installed, enabled, current, and its daemon up
    (:mod:`meshctl.cli.admin.hermes_doctor`)."""
    from meshctl._spawn import daemon_running
    from meshctl.cli.admin import hermes_doctor as _hermes_doctor

    def reachable(profile: str, socket: str | None) -> bool:
        if socket is None and profile == ctx.profile:
            return ctx.info is not None
        return daemon_running(profile, socket)

    status, message, fix = _hermes_doctor.check(ctx.profile, reachable)
    return Check("hermes", status, message, fix)


def check_connections(ctx: Context) -> Check:
    """How many connections the daemon takes at once, and what sets it: a daemon
    started under a low ``ulimit -n`` refuses clients long before ``max_connections``."""
    limits = (ctx.info or {}).get("limits")
    if not limits:
        return Check("connections", "skip", "no daemon (or one too old to say its limits)")
    allowed, files = int(limits["connections"]), int(limits["open_files"])
    now = int((ctx.info or {}).get("counts", {}).get("connections", 0))
    text = (
        f"{now} open; the daemon takes at most {allowed} at once (open-file limit "
        f"{files}, {limits['reserved_files']} kept back)"
    )
    if allowed < 256 or now >= allowed * 0.8:
        return Check(
            "connections",
            "warn",
            text,
            "raise the open-file limit meshd starts with (ulimit -n before "
            "`meshctl daemon start`, LimitNOFILE= in its systemd unit), then "
            f"meshctl daemon restart --profile {ctx.profile}",
        )
    return Check("connections", "ok", text)


CHECKS: list[Callable[[Context], Check]] = [
    check_daemon,
    check_version,
    check_connections,
    check_socket,
    check_runtime,
    check_config,
    check_state,
    check_database,
    check_service,
    check_fleet,
    check_hermes,
]


def run(ctx: Context) -> list[Check]:
    """Every check, in order; a check that raises is reported, never fatal."""
    out = []
    for check in CHECKS:
        try:
            out.append(check(ctx))
        except Exception as exc:  # a broken check must not hide the others
            name = check.__name__.removeprefix("check_")
            out.append(Check(name, "fail", f"the check itself failed: {exc!r}"))
    return out


def as_dicts(checks: list[Check]) -> list[dict[str, Any]]:
    return [asdict(c) for c in checks]
