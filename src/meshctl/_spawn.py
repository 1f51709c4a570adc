"""Find a profile's daemon, and start one when none answers (SPEC §9).

Order of looking: the socket given (argument or ``MESH_SOCKET``); else the client's own
path (:func:`meshctl._paths.socket_path`), then the path the daemon recorded in the
state folder (cron jobs often lack ``XDG_RUNTIME_DIR``).

Starting is guarded by an exclusive ``flock`` on ``<state>/<profile>.spawn.lock``:
of two racing clients, the second waits for the lock, finds the first one's daemon
answering, and starts nothing. The daemon is started, in this order, by:

1. the installed unit, when ``systemctl --user cat meshd@P.service`` finds it (only when
   the caller does not override ``MESH_SOCKET``/``MESH_STATE_DIR``: the unit would
   serve the standard paths, not the overridden ones);
2. ``systemd-run --user`` when a user manager is running;
3. a fully detached ``python -m meshd run`` (new session, no inherited stdio, output
   appended to ``<state>/<profile>.log``).

``MESH_SPAWN=direct`` skips 1 and 2 (tests, machines whose user manager misbehaves).

Standard library only. ``subprocess``, ``shutil`` and ``logging`` are imported inside the
functions that start a daemon: a command that finds its daemon running (every
``meshctl`` run but the first) must not pay for them (BENCH.md).
"""

from __future__ import annotations

import _socket  # not socket: its enums and selectors cost every command's start-up
import errno
import os
import sys
import time

from meshctl import _conn, _log, _paths
from meshctl._core import env as _env
from meshd.protocol import trust
from meshd.protocol.errors import MeshUnavailable, UntrustedSocket

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable
    from pathlib import Path

#: How long a started daemon has to answer ``mesh.ping``.
START_TIMEOUT = 10.0
#: Daemons this process started directly; kept so they can be reaped, never collected
#: while running (a dropped Popen warns and leaves a zombie).
_SPAWNED: list[subprocess.Popen[bytes]] = []
_NO_DAEMON = (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK)
#: sun_path's size, NUL included (meshd.paths.SUN_PATH_MAX; that module loads pathlib).
SUN_PATH_MAX = 104 if sys.platform == "darwin" else 108


def find_socket(profile: str, explicit: str | os.PathLike[str] | None = None) -> Path:
    """The socket to try: explicit, else ours if it exists, else the recorded one, else ours."""
    from pathlib import Path

    return Path(find_socket_str(profile, explicit))


def find_socket_str(profile: str, explicit: str | os.PathLike[str] | None) -> str:
    """:func:`find_socket` on strings (no pathlib on the connect path)."""
    if explicit:
        return trust.check_absolute(os.fspath(explicit), "socket")
    own = _paths.socket_path_str(profile)
    if _env.isset("MESH_SOCKET") or os.path.exists(own):
        return own
    recorded = _paths.recorded_socket_str(profile)
    if recorded is not None and os.path.exists(recorded):
        return recorded
    return own


def _connect(path: str, timeout: float) -> _socket.socket | None:
    """A connected socket to a daemon of ours, or None when no daemon listens there.

    Before a byte is sent, the socket's folder must be the user's own (0700, no
    symlink) and the process listening must run as the user (docs/SECURITY.md);
    otherwise :class:`UntrustedSocket`. Other connection errors raise MeshUnavailable.
    """
    _check_folder(path)
    if len(os.fsencode(path)) >= SUN_PATH_MAX:
        raise MeshUnavailable(
            f"the socket path is {len(os.fsencode(path))} bytes, over the "
            f"{SUN_PATH_MAX - 1}-byte limit of Unix sockets: {path}; set MESH_SOCKET "
            "to a shorter path",
            {"socket_path": path},
        )
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        problem = trust.peer_problem(sock, path)
    except OSError as exc:
        sock.close()
        if exc.errno in _NO_DAEMON:
            return None
        raise MeshUnavailable(
            f"cannot connect to meshd at {path}: {exc.strerror or exc}; "
            "check the socket's permissions, or set MESH_SOCKET"
        ) from exc
    if problem is not None:
        sock.close()
        raise UntrustedSocket(problem, {"socket": path})
    return sock


def dup(sock: _socket.socket) -> _socket.socket:
    """A second handle on ``sock`` (``socket.socket.dup``, which ``_socket`` lacks)."""
    return _socket.socket(sock.family, sock.type, sock.proto, os.dup(sock.fileno()))


def _check_folder(path: str) -> None:
    """Refuse a socket whose folder another user could have put it in (missing: fine)."""
    folder = os.path.dirname(path) or "."
    try:
        problem = trust.folder_problem(folder)
    except FileNotFoundError:
        return  # nothing there: no daemon (yet); starting one creates the folder 0700
    except OSError as exc:
        raise MeshUnavailable(
            f"cannot check the socket folder {folder}: {exc.strerror or exc}"
        ) from exc
    if problem is not None:
        raise UntrustedSocket(f"refusing the socket {path}: {problem}", {"socket": path})


def _ping(sock: _socket.socket) -> bool:
    """Whether the daemon on ``sock`` answers ``mesh.ping`` (within the socket's timeout)."""
    proto = _conn.Protocol()
    rid, frame = proto.request("mesh.ping")
    try:
        sock.sendall(frame)
        while True:
            msg = proto.next_message()
            if msg is None:
                data = sock.recv(65536)
                if not data:
                    return False
                proto.feed(data)
            elif isinstance(msg, _conn.Reply) and msg.id == rid:
                return msg.error is None
    except (OSError, ValueError):
        return False


def daemon_running(profile: str, socket_path: str | os.PathLike[str] | None = None) -> bool:
    """Whether a daemon answers for ``profile``; never starts one."""
    try:
        sock = _connect(find_socket_str(profile, socket_path), 2.0)
    except MeshUnavailable:
        return False
    if sock is None:
        return False
    try:
        return _ping(sock)
    finally:
        sock.close()


def connect_or_start(
    profile: str,
    socket_path: str | os.PathLike[str] | None = None,
    autostart: bool = True,
    timeout: float = 5.0,
) -> _socket.socket:
    """A socket connected to the profile's daemon, starting the daemon if allowed.

    Raises MeshUnavailable with a sentence saying what to do when there is none.
    """
    path = find_socket_str(profile, socket_path)
    sock = _connect(path, timeout)
    if sock is not None:
        return sock
    if not autostart:
        raise MeshUnavailable(
            f"no meshd is running for profile {profile!r} (socket {path}); start it with "
            f"`meshctl daemon start --profile {profile}`",
            {"socket": path, "profile": profile},
        )
    with _SpawnLock(profile):
        # Another client may have started it while we waited for the lock.
        path = find_socket_str(profile, socket_path)
        sock = _connect(path, timeout)
        if sock is not None:
            return sock
        since = _log_size(profile)
        proc, how = _start(profile, None if socket_path is None else os.fspath(socket_path))
        sock = _wait_ready(profile, socket_path, proc, timeout, how, since=since)
        # Said only now: a daemon that exits at once (a config it refuses) gets the
        # failure and its log instead (MeshUnavailable from _wait_ready).
        _started(f"started meshd for profile {profile} ({how})")
        return sock


class _SpawnLock:
    """The exclusive ``flock`` on ``<state>/<profile>.spawn.lock`` while a daemon starts.

    A class rather than ``contextlib.contextmanager``: ``contextlib`` costs start-up
    time on every command, and this runs only when a daemon has to be started.
    """

    def __init__(self, profile: str) -> None:
        self.profile = profile
        self.fd = -1

    def __enter__(self) -> None:
        import fcntl  # only when a daemon has to be started

        profile = self.profile
        state = _paths.state_dir()
        try:
            state.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(_paths.spawn_lock(profile), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise MeshUnavailable(
                f"cannot start meshd: the state folder {state} is not usable ({exc.strerror}); "
                "fix its permissions or set MESH_STATE_DIR"
            ) from exc
        try:
            deadline = time.monotonic() + START_TIMEOUT + 5.0
            delay = 0.005
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise MeshUnavailable(
                            f"another client has been starting meshd for profile {profile!r} "
                            f"for over {START_TIMEOUT + 5:.0f} s; see {_paths.log_file(profile)}"
                        ) from None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.1)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # closing drops the flock


def _which(name: str) -> str | None:
    import shutil

    return shutil.which(name)


def _systemd_user() -> bool:
    """Whether a systemd user manager answers."""
    if not _which("systemctl"):
        return False
    out = _quiet(["systemctl", "--user", "is-system-running"])
    return out is not None and out.strip() in {"running", "degraded"}


def _quiet(argv: list[str]) -> str | None:
    """Run a short command; its stdout, or None if it failed."""
    import subprocess

    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=5, stdin=subprocess.DEVNULL, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _meshd_argv(profile: str) -> list[str]:
    beside = os.path.join(os.path.dirname(sys.executable), "meshd")
    exe = beside if os.path.exists(beside) else _which("meshd")
    base = [exe] if exe else [sys.executable, "-m", "meshd"]
    return [*base, "run", "--profile", profile]


ANNOUNCE: list[Callable[[str], None]] = []
"""Told, in a sentence, when this process started a daemon (the CLI says so on stderr)."""


def _started(message: str) -> None:
    _log.info("%s", message)
    for tell in ANNOUNCE:
        tell(message)


def _start(profile: str, socket_path: str | None) -> tuple[subprocess.Popen[bytes] | None, str]:
    """Start the daemon serving ``socket_path`` (the client's, from its argument or
    ``MESH_SOCKET``; None: the standard one): the Popen when we started it directly
    (None via systemd), and how it was started, for the sentences about it."""
    environment = _env.Environment.read()
    passed = environment.passed(socket_path)
    via_systemd = not environment.spawn_direct
    unit = f"meshd@{profile}.service"
    if via_systemd and _start_unit(profile, unit, passed):
        return None, unit
    if via_systemd and _which("systemd-run") and _systemd_user():
        setenv = [f"--setenv={k}={v}" for k, v in passed.items()]
        argv = ["systemd-run", "--user", "--collect", "--quiet", "--unit", f"meshd-{profile}"]
        if _quiet([*argv, *setenv, *_meshd_argv(profile)]) is not None:
            return None, "systemd-run --user"
    proc = _start_detached(profile, environment.for_daemon(socket_path))
    return proc, f"pid {proc.pid}, log {_paths.log_file(profile)}"


def _start_unit(profile: str, unit: str, passed: dict[str, str]) -> bool:
    """Start the installed ``meshd@P.service``, unless the caller overrides the paths."""
    if "MESH_SOCKET" in passed or "MESH_STATE_DIR" in passed:
        return False
    if not _which("systemctl") or _quiet(["systemctl", "--user", "cat", unit]) is None:
        return False
    return _quiet(["systemctl", "--user", "start", unit]) is not None


def _start_detached(profile: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    import subprocess

    _reap()
    logfile = _paths.log_file(profile)
    with open(logfile, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "meshd", "run", "--profile", profile],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            close_fds=True,
            cwd="/",
            env=env,
        )
    _SPAWNED.append(proc)
    return proc


def _reap() -> None:
    """Collect the exit status of daemons we started that have since exited."""
    _SPAWNED[:] = [p for p in _SPAWNED if p.poll() is None]


def _wait_ready(
    profile: str,
    socket_path: str | os.PathLike[str] | None,
    proc: subprocess.Popen[bytes] | None,
    timeout: float,
    how: str,
    *,
    since: int = 0,
) -> _socket.socket:
    """Wait, with backoff, until the new daemon answers ``mesh.ping``; MeshUnavailable
    saying what happened (and what it logged from byte ``since`` on) when it exits or
    never answers."""
    deadline = time.monotonic() + START_TIMEOUT
    delay = 0.005
    while time.monotonic() < deadline:
        exited = proc is not None and proc.poll() is not None
        sock = _connect(find_socket_str(profile, socket_path), timeout)
        if sock is not None:
            if _ping(sock):
                return sock
            sock.close()
        if exited:
            # Ours exited; one started outside this lock (a service manager) may serve.
            assert proc is not None
            raise _start_failed(profile, f"meshd exited with status {proc.returncode}", how, since)
        time.sleep(delay)
        delay = min(delay * 2, 0.25)
    raise _start_failed(profile, f"meshd did not answer within {START_TIMEOUT:.0f} s", how, since)


def _log_size(profile: str) -> int:
    """Where the profile's log ends now: what a daemon about to start writes comes after."""
    try:
        return _paths.log_file(profile).stat().st_size
    except OSError:
        return 0


def _start_failed(profile: str, what: str, how: str, since: int = 0) -> MeshUnavailable:
    """The failed start in a sentence: the daemon's own refusal when it wrote one.

    Only what this start wrote to the log is read (from byte ``since``): the log is
    appended to by every start, and the refusal of an earlier one (a config since
    fixed, a reload long ago) quoted beside this one's hides which is the reason.
    meshd says why it refuses in one line, ``meshd: <why>`` (and indented lines after
    it with the fix, for some); that becomes the message, and the log lines are shown
    only when there is no such line.
    """
    logfile = _paths.log_file(profile)
    try:
        with open(logfile, "rb") as f:
            f.seek(since if since <= os.fstat(f.fileno()).st_size else 0)  # truncated: all
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        lines = []
    starts = [i for i, line in enumerate(lines) if line.startswith("meshd: ")]
    reasons = []
    if starts:  # the last refusal, with its indented lines (the command that fixes it)
        first = starts[-1]
        end = first + 1
        while end < len(lines) and lines[end][:1].isspace():
            end += 1
        reasons = ["\n".join(lines[first:end]).removeprefix("meshd: ")]
    journal = ""
    if how.startswith(("meshd@", "systemd-run")):
        name = how if how.startswith("meshd@") else f"meshd-{profile}"
        journal = f"; its output is in `journalctl --user -u {name}`"
    data = {"profile": profile, "log": os.fspath(logfile)}
    if reasons:
        return MeshUnavailable(
            f"could not start meshd for profile {profile!r}: {reasons[-1]}\n"
            f"  ({what}; started with {how}{journal})",
            data,
        )
    shown = "\n".join(f"  | {line}" for line in lines[-15:]) or "  (it wrote nothing there)"
    return MeshUnavailable(
        f"could not start meshd for profile {profile!r} (started with {how}): {what}{journal}; "
        f"what it wrote to {logfile}:\n{shown}\n"
        f"run `meshd run --profile {profile} --log-level debug` to see why",
        data,
    )
