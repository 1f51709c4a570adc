"""``meshctl service install|uninstall|status [--systemd|--launchd]``.

Installs this profile's daemon as a user service, so it starts at login (or on the
first connection, with systemd's socket activation) and is restarted after a crash.
The rules (where files go, what is refused, how a running daemon is handed over)
are in :mod:`meshctl.cli.admin.service`; this module parses and prints.

Exit codes: 0 done (or, when the service manager does not answer, the files are
written and the commands to finish are printed); 1 a refusal (a unit file that
meshctl did not write, no ``meshd`` to point at, a manager command that failed).
``status`` always exits 0 when it could look: its answer (``installed``,
``current`` per file, ``enabled``, ``active``) is the outcome.
"""

from __future__ import annotations

import functools
from typing import Any

import click

from meshctl.cli import _output
from meshctl.cli._context import common_options, get_state


def _manager_option(func: Any) -> Any:
    """``--systemd`` | ``--launchd`` as ``manager=``: alternatives (SPEC §9), so giving
    both is a usage error, not the last one silently winning."""

    @functools.wraps(func)
    def command(*args: Any, systemd: bool, launchd: bool, **kwargs: Any) -> Any:
        if systemd and launchd:
            raise click.UsageError("give --systemd or --launchd, not both")
        manager = "systemd" if systemd else "launchd" if launchd else None
        return func(*args, manager=manager, **kwargs)

    command = click.option("--launchd", is_flag=True, help="A LaunchAgent (macOS).")(command)
    return click.option("--systemd", is_flag=True, help="systemd user units (Linux).")(command)


def _manager(value: str | None) -> Any:
    from meshctl.cli.admin import service as _service

    return value or _service.default_manager()


def _refusal(exc: Exception) -> _output.Failure:
    return _output.Failure(str(exc), "SERVICE_REFUSED")


def _render_plan(plan: Any, verb: str) -> str:
    lines = [f"{verb} the {plan['manager']} service for profile {plan['profile']}:"]
    lines += [f"  {'wrote' if verb == 'Installed' else 'removed'} {p}" for p in plan["files"]]
    lines += [f"  ran: {c}" for c in plan["ran"]]
    lines += [f"  note: {n}" for n in plan["notes"]]
    if plan["todo"]:
        lines.append("The service manager did not answer; to finish, run:")
        lines += [f"  {c}" for c in plan["todo"]]
    return "\n".join(lines)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@common_options
def service() -> None:
    """Run this profile's daemon as a user service (systemd or launchd)."""


@service.command()
@common_options
@_manager_option
def install(manager: str | None) -> None:
    """Write the unit files and enable them (the daemon starts on first use).

    \b
    Examples:
      meshctl service install                 # systemd on Linux, launchd on macOS
      meshctl service install --profile work
    """
    from meshctl.cli.admin import service as _service

    state = get_state()
    try:
        plan = _service.as_dict(_service.install(state.profile, _manager(manager)))
    except _service.ServiceError as exc:
        raise _refusal(exc) from exc
    _output.emit(state.json, plan, lambda: _render_plan(plan, "Installed"))


@service.command()
@common_options
@_manager_option
def uninstall(manager: str | None) -> None:
    """Stop the service and remove the files meshctl wrote (state is kept).

    \b
    Examples:
      meshctl service uninstall --profile work
    """
    from meshctl.cli.admin import service as _service

    state = get_state()
    try:
        plan = _service.as_dict(_service.uninstall(state.profile, _manager(manager)))
    except _service.ServiceError as exc:
        raise _refusal(exc) from exc
    _output.emit(state.json, plan, lambda: _render_plan(plan, "Uninstalled"))


def _render_status(out: dict[str, Any]) -> str:
    lines = [f"{out['manager']} service for profile {out['profile']}:"]
    for f in out["files"]:
        if not f["present"]:
            what = "missing"
        elif not f["managed"]:
            what = "present, not written by meshctl"
        elif not f["current"]:
            what = f"outdated (session-mesh {f['version']}): run `meshctl service install`"
        else:
            what = f"installed (session-mesh {f['version']})"
        lines.append(f"  {f['path']}: {what}")
    if out["reachable"]:
        lines.append(f"  enabled: {'yes' if out['enabled'] else 'no'}")
        lines.append(f"  active:  {'yes' if out['active'] else 'no'}")
    else:
        lines.append("  the service manager does not answer here (enabled/active unknown)")
    return "\n".join(lines)


@service.command()
@common_options
@_manager_option
def status(manager: str | None) -> None:
    """Show whether the service is installed, current, enabled and active.

    \b
    Examples:
      meshctl service status --json
    """
    from meshctl.cli.admin import service as _service

    state = get_state()
    out = _service.status(state.profile, _manager(manager))
    _output.emit(state.json, out, lambda: _render_status(out))
