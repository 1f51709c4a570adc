"""``meshctl daemon start|stop|status|restart|reload|logs``.

``status`` and ``stop`` never start a daemon (SPEC §9): status exits 0 when one
answers and 69 when none does; stop asks the running daemon its pid
(``mesh.info``), sends it SIGTERM and waits up to 10 s for the process to be
gone. Stopping a profile with no daemon is not an error (exit 0, with a note):
the wanted state already holds.

``reload`` calls ``mesh.reload`` (what SIGHUP does). An invalid config file is
kept out by the daemon, which goes on with the config it had; the CLI reports
that as an error (exit 1, ``data.code`` ``CONFIG_INVALID``) so a script that
edits the file and reloads learns that its edit did not take. The daemon reads the
file it was started with (``path`` in the answer); when this shell's config file
(``MESH_CONFIG``, or the standard place) is another, a note on stderr says so.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

import click

from meshctl.cli import _output, _time
from meshctl.cli._context import Group, State, common_options, get_state
from meshd.protocol.errors import MeshTimeout, MeshUnavailable

STOP_TIMEOUT = 10.0


def connection_limit(limits: dict[str, Any]) -> str:
    """ "at most 20 connections (open-file limit 64, 44 kept back)"."""
    return (
        f"at most {limits.get('connections')} connections (open-file limit "
        f"{limits.get('open_files')}, {limits.get('reserved_files')} kept back)"
    )


def render_info(info: dict[str, Any]) -> str:
    """``daemon status`` for people: what runs, where, since when, holding what."""
    counts = info.get("counts") or {}
    lines = [
        f"meshd {info.get('version')} (protocol {info.get('protocol_version')}) is running "
        f"for profile {info.get('profile')}",
        f"  pid       {info.get('pid')}",
        f"  socket    {info.get('socket')}",
        f"  uptime    {_time.duration(float(info.get('uptime_s') or 0))} "
        f"(since {_time.local(info.get('started_at'))})",
        f"  sessions  {counts.get('sessions', 0)} ({counts.get('stale', 0)} stale), "
        f"claims {counts.get('claims', 0)}, waiters {counts.get('waiters', 0)}, "
        f"signal waits {counts.get('signal_waits', 0)}, "
        f"connections {counts.get('connections', 0)}",
        f"  state     {info.get('state_dir')}",
    ]
    limits = info.get("limits")
    if limits:
        lines.insert(-1, f"  limits    {connection_limit(limits)}")
    if not info.get("enabled", True):
        lines.append("  enabled   no (enabled = false in config: the mesh is switched off)")
    return "\n".join(lines)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@common_options
def daemon() -> None:
    """Start, stop, inspect or reload this profile's daemon."""


def _recorded_elsewhere(state: State, sock: str, code: int) -> _output.Failure | None:
    """Nothing at ``sock``, but the profile's daemon answers on the socket it recorded
    (MESH_SOCKET or --socket names another path): where it is and how to reach it.
    "Start it" would not help there: the profile's daemon runs."""
    import socket as _socket

    from meshctl import _paths

    recorded = _paths.recorded_socket_str(state.profile)
    if recorded is None or recorded == sock:
        return None
    probe = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(recorded)
    except OSError:
        return None  # nothing answers there either: the plain "not running"
    finally:
        probe.close()
    how = (
        f"give --socket {recorded}, or leave --socket out"
        if "socket" in state.explicit
        else f"set MESH_SOCKET={recorded} or unset MESH_SOCKET"
    )
    return _output.Failure(
        f"no meshd answers on {sock}, but the daemon of profile {state.profile} serves "
        f"{recorded} (its recorded socket)",
        "UNAVAILABLE",
        code=code,
        exit_code=_output.EXIT_UNAVAILABLE,
        data={"running": False, "socket": sock, "recorded_socket": recorded},
        hint=f"to reach it, {how}",
    )


@daemon.command()
@common_options
def status() -> None:
    """Show the running daemon; exit 69 when none runs (never starts one).

    \b
    Examples:
      meshctl daemon status
      meshctl daemon status --json
    """
    state = get_state()
    try:
        info = state.call("mesh.info", autostart=False)
    except MeshTimeout as exc:
        raise _hung(state, exc) from exc
    except MeshUnavailable as exc:
        # The library's "not running" error (the base class, naming the socket) is said
        # as such; the others keep their own sentence and no "start it" hint: a socket
        # refused as untrusted, a daemon of another profile at MESH_SOCKET, a path too
        # long -- a daemon may well run there, and starting one would not help.
        sock = exc.data.get("socket") if type(exc) is MeshUnavailable else None
        data = {k: v for k, v in exc.data.items() if k != "code"}
        if sock and (elsewhere := _recorded_elsewhere(state, str(sock), exc.code)):
            raise elsewhere from exc
        raise _output.Failure(
            f"no meshd is running for profile {state.profile} (socket {sock})"
            if sock
            else exc.message,
            exc.data_code if not sock else "UNAVAILABLE",
            code=exc.code,
            exit_code=_output.EXIT_UNAVAILABLE,
            data={"running": False, **data} if sock else data,
            hint=f"start it with `meshctl daemon start --profile {state.profile}` "
            "(any other command starts it too)"
            if sock
            else "",
        ) from exc
    _output.emit(state.json, info, lambda: render_info(info))


def _start(state: State) -> tuple[dict[str, Any], bool]:
    """Make sure a daemon runs; its ``mesh.info`` and whether it already ran."""
    from meshctl import _spawn

    running = _spawn.daemon_running(state.profile, state.socket)
    state.mesh()  # registers the stderr note "started meshd …" that other commands give:
    if _output.note in _spawn.ANNOUNCE:  # this command says it on stdout, once
        _spawn.ANNOUNCE.remove(_output.note)
    info = state.call("mesh.info")
    return info, running


@daemon.command()
@common_options
def start() -> None:
    """Start the daemon unless it runs already; print what runs.

    \b
    Examples:
      meshctl daemon start
    """
    state = get_state()
    info, was_running = _start(state)
    verb = "was already running" if was_running else "started"
    _output.emit(
        state.json,
        {**info, "already_running": was_running},
        lambda: (
            f"meshd {verb}: profile {info.get('profile')}, pid {info.get('pid')}, "
            f"socket {info.get('socket')}"
        ),
    )


def _process_gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie awaiting its parent counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    if sys.platform.startswith("linux"):
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                # state is the field after "(comm)", which may itself hold spaces
                return f.read().rpartition(")")[2].split()[0] in {"Z", "X"}
        except (OSError, IndexError):
            return True
    return False


def lock_holder(profile: str) -> int | None:
    """The pid recorded in ``<state>/<profile>.lock`` when it is a live ``meshd run`` of
    this profile (the file outlives its daemon, and pids are reused: both checked)."""
    from meshctl import _paths

    try:
        with open(os.path.join(_paths.state_dir_str(), f"{profile}.lock"), "rb") as f:
            pid = int(f.read(64).strip() or b"0")
    except (OSError, ValueError):
        return None
    if pid <= 0 or _process_gone(pid):
        return None
    if sys.platform.startswith("linux"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            return None
        if not any(b"meshd" in a for a in argv) or profile.encode() not in argv:
            return None
    return pid


def _hung(state: State, exc: MeshTimeout) -> _output.Failure:
    """A daemon that takes connections but does not answer (stopped, stuck, overloaded):
    said with its pid and the way out, not "try again, or check `meshctl daemon status`"
    (which is what was run)."""
    from meshctl import _paths

    pid = lock_holder(state.profile)
    who = f"meshd (pid {pid})" if pid else "meshd"
    log = os.path.join(_paths.state_dir_str(), f"{state.profile}.log")
    force = f" (kill -9 {pid} if it does not go)" if pid else ""
    return _output.Failure(
        f"{who} of profile {state.profile} takes connections but did not answer: "
        f"{exc.message} (stopped, stuck or overloaded)",
        "TIMEOUT",
        code=exc.code,
        exit_code=_output.EXIT_TEMPFAIL,
        data={"pid": pid, "running": True},
        hint=f"its log: {log}; `meshctl daemon stop --profile {state.profile}` stops it{force}",
    )


def _stop(state: State) -> dict[str, Any]:
    """Stop the daemon, if one runs; what happened, as the JSON result.

    A daemon that does not answer ``mesh.info`` (stopped, stuck) is found by the pid
    in its lock file and sent SIGTERM all the same: it is the one daemon ``stop``
    must be able to end.
    """
    try:
        info = state.call("mesh.info", autostart=False)
    except MeshTimeout as exc:
        pid = lock_holder(state.profile)
        if pid is None:
            raise _hung(state, exc) from exc
        info = {"pid": pid, "profile": state.profile, "state_dir": None}
    except MeshUnavailable as exc:
        if type(exc) is not MeshUnavailable:
            raise  # refused as untrusted, another profile's daemon: not "nothing to stop"
        return {"stopped": False, "running": False, "profile": state.profile, "note": exc.message}
    finally:
        # No client of ours stays connected while it shuts down, and a later
        # start (restart) gets a fresh client that may start a daemon.
        state.close()
    pid = int(info["pid"])
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return {"stopped": True, "running": False, "profile": info.get("profile"), "pid": pid}
    deadline = time.monotonic() + STOP_TIMEOUT
    delay = 0.01
    while not _process_gone(pid):
        if time.monotonic() > deadline:
            raise _output.Failure(
                f"meshd (pid {pid}, profile {info.get('profile')}) did not exit within "
                f"{STOP_TIMEOUT:.0f} s of SIGTERM",
                "STOP_TIMEOUT",
                data={"pid": pid},
                hint=f"look at its log in {info.get('state_dir') or 'the state folder'}; "
                f"to force it: kill -9 {pid}",
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    return {"stopped": True, "running": False, "profile": info.get("profile"), "pid": pid}


def stop_profile(profile: str) -> int | None:
    """Stop ``profile``'s running daemon, if any (``service install`` hands over with it);
    the pid it had."""
    state = State()
    state.profile = profile
    result = _stop(state)
    return int(result["pid"]) if result["stopped"] else None


@daemon.command()
@common_options
def stop() -> None:
    """Stop the running daemon (SIGTERM) and wait until it has exited.

    \b
    Examples:
      meshctl daemon stop
    """
    state = get_state()
    result = _stop(state)
    if not result["stopped"]:
        _output.note(f"no meshd is running for profile {state.profile}; nothing to stop")
    _output.emit(
        state.json,
        result,
        lambda: (
            f"Stopped meshd (profile {result['profile']}, pid {result['pid']})."
            if result["stopped"]
            else None
        ),
    )


@daemon.command()
@common_options
def restart() -> None:
    """Stop the daemon (if it runs), then start it again.

    \b
    Examples:
      meshctl daemon restart --profile work
    """
    state = get_state()
    stopped = _stop(state)
    info, _ = _start(state)
    was = f"was pid {stopped['pid']}" if stopped["stopped"] else "none was running"
    _output.emit(
        state.json,
        {**info, "previous_pid": stopped.get("pid")},
        lambda: (
            f"meshd restarted: profile {info.get('profile')}, pid {info.get('pid')} "
            f"({was}), socket {info.get('socket')}"
        ),
    )


@daemon.command()
@common_options
def reload() -> None:
    """Re-read config.toml; an invalid file is refused and the old config kept.

    \b
    Examples:
      meshctl daemon reload
    """
    state = get_state()
    result = state.call("mesh.reload")
    if not result.get("reloaded"):
        raise _output.Failure(
            f"config not reloaded, the daemon keeps its previous config: {result.get('error')}",
            "CONFIG_INVALID",
            data={"reloaded": False, "error": result.get("error")},
            hint="fix the file (MESH_CONFIG, or config.toml in the config folder) and run "
            "`meshctl daemon reload` again",
        )
    _unused_tables_note(state)
    read = result.get("path")
    _other_file_note(read)
    where = f" from {read}" if read else ""
    _output.emit(state.json, result, f"Config reloaded{where} (profile {state.profile}).")


def _other_file_note(read: str | None) -> None:
    """Say when the daemon reads another file than this shell names: its path is fixed
    when it starts (``MESH_CONFIG`` then, or the standard place), so an edit of the file
    ``MESH_CONFIG`` names here is not what a reload reads."""
    from meshctl.cli.admin.config import config_file

    here = str(config_file())
    if read and read != here:
        _output.note(
            f"this daemon reads {read}, not {here} (the config file in this environment: "
            "MESH_CONFIG, or the standard place); restart it from this environment "
            "(`meshctl daemon restart`) to have it read that one"
        )


def _unused_tables_note(state: State) -> None:
    """Say on stderr a ``[profiles.NAME]`` table no profile uses (a typo the daemon
    cannot see: it reads its own profile's table only), as ``doctor`` does."""
    from meshctl import _paths, _spawn
    from meshctl.cli.admin.config import config_file, unused_profile_tables

    socket_dir = _spawn.find_socket(state.profile, state.socket).parent
    said = unused_profile_tables(config_file(), state.profile, _paths.state_dir(), socket_dir)
    if said is not None:
        _output.note(f"{said}; rename or remove the table in {config_file()}")


from meshctl.cli.daemon_logs import logs  # noqa: E402  (a command of its own module)

daemon.add_command(logs)
