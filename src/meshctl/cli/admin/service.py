"""Install, remove and inspect the per-profile user service (``meshctl service``).

The unit files ship inside the package (``meshctl/units/``; the repository's
``systemd/`` and ``launchd/`` point there) with two placeholders: ``@MESHD@``
becomes the absolute path of the ``meshd`` beside this interpreter, ``@PROFILE@``
(launchd only; systemd uses the ``%i`` of its template) the profile. Rendered
files start with :data:`MARKER`: a file without it was not written by us and is
never overwritten or removed.

systemd gets the *template* pair ``meshd@.socket`` + ``meshd@.service`` in
``$XDG_CONFIG_HOME/systemd/user/`` (one install serves every profile; enabling
``meshd@P.socket`` is per profile). launchd gets one LaunchAgent per profile,
``~/Library/LaunchAgents/org.sessionmesh.meshd.P.plist``.

Managers are driven only when they answer (``systemctl --user`` /
``launchctl``); otherwise the exact commands are returned for the person to run.
The state folder is never touched: uninstalling a service keeps every session,
note and ledger entry.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Literal

from meshctl._core import env as _env
from meshd import __version__

Manager = Literal["systemd", "launchd"]
MARKER = "Managed by meshctl service install"
SYSTEMD_FILES = ("meshd@.socket", "meshd@.service")
LAUNCHD_LABEL = "org.sessionmesh.meshd.{profile}"


class ServiceError(Exception):
    """A refusal with the sentence to show (a foreign unit, no meshd to point at)."""


@dataclass
class Plan:
    """What an install/uninstall did or would do, for people and for ``--json``."""

    manager: Manager
    profile: str
    files: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    todo: list[str] = field(default_factory=list)  # commands for the person to run
    notes: list[str] = field(default_factory=list)


def as_dict(plan: Plan) -> dict[str, object]:
    """``plan`` as the ``--json`` document."""
    return asdict(plan)


def default_manager() -> Manager:
    return "launchd" if sys.platform == "darwin" else "systemd"


def meshd_path() -> str:
    """The absolute path of the ``meshd`` that belongs to this installation.

    The script beside this interpreter first (a venv's or pipx's ``bin/``; not
    resolved, so a venv's python symlink keeps pointing into the venv), then the
    one on ``PATH``.
    """
    beside = Path(sys.executable).parent / "meshd"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside.absolute())
    found = shutil.which("meshd")
    if found:
        return str(Path(found).absolute())
    raise ServiceError(
        f"no meshd executable beside {sys.executable} or on PATH: "
        "install session-mesh (pipx install . / pip install --user .) and run this again"
    )


def _template(*parts: str) -> str:
    return resources.files("meshctl").joinpath("units", *parts).read_text(encoding="utf-8")


def _header(comment: str) -> str:
    return f"{comment} {MARKER} (session-mesh {__version__}); edits are overwritten.\n"


def render_systemd(name: str, meshd: str) -> str:
    """One systemd template file, rendered, with the managed marker on top."""
    return _header("#") + _template("systemd", name).replace("@MESHD@", meshd)


def render_launchd(
    profile: str, meshd: str, log: str, environment: dict[str, str] | None = None
) -> str:
    """The LaunchAgent for ``profile``, rendered (the marker is an XML comment), with
    ``environment`` as its EnvironmentVariables (:mod:`.service_env`)."""
    from meshctl.cli.admin import service_env

    text = _template("launchd", "meshd.plist.in")
    for key, value in (("@MESHD@", meshd), ("@PROFILE@", profile), ("@LOG@", log)):
        text = text.replace(key, _xml_escape(value))
    extra = service_env.launchd_dict(environment or {}, _xml_escape)
    text = text.replace("</dict>\n</plist>", f"{extra}</dict>\n</plist>")
    head, _, rest = text.partition("\n")  # the XML declaration stays the first line
    return f"{head}\n<!-- {MARKER} (session-mesh {__version__}); edits are overwritten. -->\n{rest}"


def _xml_escape(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def systemd_dir() -> Path:
    base = _env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "systemd" / "user"


def launchd_path(profile: str) -> Path:
    name = LAUNCHD_LABEL.format(profile=profile) + ".plist"
    return Path(os.path.expanduser("~")) / "Library" / "LaunchAgents" / name


def _head(path: Path) -> list[str] | None:
    """The first three lines of ``path`` when it is a regular file, never through a
    symlink at ``path`` and never blocking on a named pipe there; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return [f.readline(4096).decode("utf-8", "replace") for _ in range(3)]


def is_managed(path: Path) -> bool:
    """Whether ``path`` was written by us: a regular file (not a symlink to one) whose
    first lines carry :data:`MARKER`."""
    return any(MARKER in line for line in _head(path) or ())


def installed_version(path: Path) -> str | None:
    """The session-mesh version stamped into a managed file, if any."""
    for line in _head(path) or ():
        if MARKER in line and "(session-mesh " in line:
            return line.split("(session-mesh ", 1)[1].split(")", 1)[0]
    return None


def _refuse_foreign(paths: list[Path]) -> None:
    """Refuse before writing anything when one of ``paths`` is someone else's: a file
    without our marker, or anything that is not a regular file (we never write a
    symlink, so one at the final name was put there by someone else)."""
    for path in paths:
        if path.is_symlink():
            raise ServiceError(
                f"{path} is a symbolic link (to {os.readlink(path)}), not written by "
                "meshctl, which never writes through one: move it away (or remove it) "
                "and run this again"
            )
        if path.exists() and not is_managed(path):
            raise ServiceError(
                f"{path} exists and was not written by meshctl: "
                "move it away (or remove it) and run this again"
            )


def _write(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` (ours or absent); whether it changed.

    The text goes to a new temporary file in the same folder, created with
    ``O_CREAT|O_EXCL|O_NOFOLLOW`` under a name nobody can have prepared (so nothing
    planted there -- a symlink, another file -- is written through or taken over),
    synced, then renamed over ``path``. The rename replaces whatever entry is at
    ``path`` and never follows it; :func:`_refuse_foreign` has refused a foreign one.
    """
    if _head(path) is not None and path.read_bytes() == text.encode("utf-8"):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, flags, 0o644)
            break
        except FileExistsError:
            continue  # astronomically unlikely; pick another name
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True


def _run(argv: list[str], timeout: float = 20.0) -> subprocess.CompletedProcess[str] | None:
    """Run a manager command; None when it is missing or does not answer."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def systemd_reachable() -> bool:
    """Whether a systemd user manager answers ``systemctl --user``."""
    if _env.get("MESH_SERVICE_MANAGER") == "none":  # tests, and people who want files only
        return False
    done = _run(["systemctl", "--user", "show-environment"], timeout=5.0)
    return done is not None and done.returncode == 0


def launchd_reachable() -> bool:
    if _env.get("MESH_SERVICE_MANAGER") == "none" or sys.platform != "darwin":
        return False
    return shutil.which("launchctl") is not None


def _step(plan: Plan, argv: list[str], live: bool) -> None:
    """Run ``argv`` when the manager answers, else leave it for the person."""
    text = " ".join(argv)
    if not live:
        plan.todo.append(text)
        return
    done = _run(argv)
    if done is None or done.returncode != 0:
        err = (done.stderr.strip() if done is not None else "") or "did not answer"
        raise ServiceError(f"`{text}` failed: {err}")
    plan.ran.append(text)


def install(profile: str, manager: Manager, *, stop_running: bool = True) -> Plan:
    """Write the unit files and, when the manager answers, enable and start them.

    A daemon already running for ``profile`` outside the manager is stopped first
    (SIGTERM: it stores a final snapshot) so the manager's daemon takes over the
    same state folder; sessions are restored from it (``process`` sessions at once,
    ``heartbeat`` sessions with one ``stale_after`` of grace). ``MESH_CONFIG``,
    ``MESH_STATE_DIR`` and ``MESH_SOCKET`` set here go into the service too
    (:mod:`.service_env`).
    """
    from meshctl.cli.admin import service_env

    meshd = meshd_path()
    plan = Plan(manager, profile)
    try:
        environment = service_env.overrides()
    except service_env.EnvironmentRefused as exc:
        raise ServiceError(f"{exc}; nothing was written") from exc
    if manager == "systemd":
        _install_systemd(plan, meshd, environment, stop_running)
    else:
        _install_launchd(plan, meshd, environment, stop_running)
    if environment:
        plan.notes.append(service_env.note(environment))
    return plan


def _install_systemd(
    plan: Plan, meshd: str, environment: dict[str, str], stop_running: bool
) -> None:
    """The shared templates, this profile's drop-ins (or none), then the manager."""
    from meshctl.cli.admin import service_env

    folder = systemd_dir()
    dropins = service_env.dropin_paths(folder, plan.profile)
    _refuse_foreign([folder / name for name in SYSTEMD_FILES] + dropins)
    for name in SYSTEMD_FILES:
        path = folder / name
        if _write(path, render_systemd(name, meshd)):
            plan.files.append(str(path))
        else:
            plan.notes.append(f"{path} is up to date")
    texts = service_env.render_dropins(_header("#"), environment)
    for path, text in zip(dropins, texts, strict=True):
        if text is None:
            _remove_dropin(plan, path)
        elif _write(path, text):
            plan.files.append(str(path))
    live = systemd_reachable()
    if live and stop_running:
        _hand_over(plan, plan.profile)
    _step(plan, ["systemctl", "--user", "daemon-reload"], live)
    _step(plan, ["systemctl", "--user", "enable", "--now", f"meshd@{plan.profile}.socket"], live)


def _remove_dropin(plan: Plan, path: Path) -> None:
    """A drop-in an earlier install wrote, when none of its variables is set now."""
    gone = Plan(plan.manager, plan.profile)
    _remove(gone, path)
    plan.notes += gone.notes + [
        f"removed {p}: none of its variables is set here, so the service is back on the defaults"
        for p in gone.files
    ]


def _install_launchd(
    plan: Plan, meshd: str, environment: dict[str, str], stop_running: bool
) -> None:
    """This profile's LaunchAgent, then the manager."""
    from meshctl import _paths

    path = launchd_path(plan.profile)
    _refuse_foreign([path])
    log = str(_paths.state_dir() / f"{plan.profile}.log")
    if _write(path, render_launchd(plan.profile, meshd, log, environment)):
        plan.files.append(str(path))
    live = launchd_reachable()
    if live and stop_running:
        _hand_over(plan, plan.profile)
    _step(plan, ["launchctl", "bootstrap", f"gui/{os.getuid()}", str(path)], live)


def _hand_over(plan: Plan, profile: str) -> None:
    """Stop a detached daemon of ``profile`` so the manager's one owns the state."""
    from meshctl.cli.daemon import stop_profile

    stopped = stop_profile(profile)
    if stopped:
        plan.notes.append(f"stopped the running meshd of profile {profile} (pid {stopped})")


def uninstall(profile: str, manager: Manager) -> Plan:
    """Stop and remove what :func:`install` wrote; the state folder stays."""
    plan = Plan(manager, profile)
    if manager == "systemd":
        live = systemd_reachable()
        _step_quiet(
            plan, ["systemctl", "--user", "disable", "--now", f"meshd@{profile}.socket"], live
        )
        _step_quiet(plan, ["systemctl", "--user", "stop", f"meshd@{profile}.service"], live)
        from meshctl.cli.admin import service_env

        for path in service_env.dropin_paths(systemd_dir(), profile):
            _remove(plan, path)
        others = _other_enabled_profiles(profile) if live else []
        if others:
            plan.notes.append(
                "kept the template units: still enabled for " + ", ".join(sorted(others))
            )
        else:
            for name in SYSTEMD_FILES:
                _remove(plan, systemd_dir() / name)
            _step(plan, ["systemctl", "--user", "daemon-reload"], live)
    else:
        path = launchd_path(profile)
        live = launchd_reachable()
        label = LAUNCHD_LABEL.format(profile=profile)
        _step_quiet(plan, ["launchctl", "bootout", f"gui/{os.getuid()}/{label}"], live)
        _remove(plan, path)
    plan.notes.append("the state folder (sessions, notes, ledger) was left as it is")
    return plan


def _step_quiet(plan: Plan, argv: list[str], live: bool) -> None:
    """Like :func:`_step`, but a failure (nothing to stop) is only noted."""
    try:
        _step(plan, argv, live)
    except ServiceError as exc:
        plan.notes.append(str(exc))


def _remove(plan: Plan, path: Path) -> None:
    if not (path.exists() or path.is_symlink()):
        return
    if not is_managed(path):  # a symlink is never ours, whatever it points to
        plan.notes.append(f"left {path} alone: it was not written by meshctl")
        return
    path.unlink()
    plan.files.append(str(path))
    if path.parent.name.endswith(".d"):  # a drop-in's folder, gone with its last file
        with contextlib.suppress(OSError):
            path.parent.rmdir()


def _other_enabled_profiles(profile: str) -> list[str]:
    done = _run(["systemctl", "--user", "list-unit-files", "--no-legend", "meshd@*.socket"])
    if done is None or done.returncode != 0:
        return []
    names = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    return [
        n.removeprefix("meshd@").removesuffix(".socket")
        for n in names
        if n not in {"meshd@.socket", f"meshd@{profile}.socket"}
    ]


def status(profile: str, manager: Manager) -> dict[str, object]:
    """Installed? ours? which version? enabled and active (when the manager answers)?"""
    if manager == "systemd":
        paths = [systemd_dir() / name for name in SYSTEMD_FILES]
    else:
        paths = [launchd_path(profile)]
    files = [
        {
            "path": str(p),
            "present": p.exists(),
            "managed": is_managed(p),
            "version": installed_version(p),
            "current": installed_version(p) == __version__,
        }
        for p in paths
    ]
    out: dict[str, object] = {
        "manager": manager,
        "profile": profile,
        "installed": all(f["present"] and f["managed"] for f in files),
        "current": all(f["current"] for f in files),
        "files": files,
        "enabled": None,
        "active": None,
        "reachable": False,
    }
    if manager == "systemd" and systemd_reachable():
        out["reachable"] = True
        sock = f"meshd@{profile}.socket"
        out["enabled"] = _answer(["systemctl", "--user", "is-enabled", sock]) == "enabled"
        out["active"] = _answer(["systemctl", "--user", "is-active", sock]) == "active"
    elif manager == "launchd" and launchd_reachable():
        out["reachable"] = True
        label = LAUNCHD_LABEL.format(profile=profile)
        done = _run(["launchctl", "print", f"gui/{os.getuid()}/{label}"])
        out["enabled"] = out["active"] = done is not None and done.returncode == 0
    return out


def _answer(argv: list[str]) -> str:
    done = _run(argv)
    return done.stdout.strip() if done is not None else ""
