"""``meshctl hermes install|uninstall|status``: put Hermes Agent sessions on the mesh.

Which Hermes profiles: ``--profile NAME`` (that profile; ``default`` is Hermes's
root home), ``--all-profiles``, or ``--hermes-home PATH`` (a home outside the
standard place: its mesh profile is the ``--profile``/``MESH_PROFILE`` in effect,
recorded by install). Without any: the home ``HERMES_HOME`` names, else ``~/.hermes``.
The mesh profile of a Hermes profile is its name (SPEC §2).
"""

from __future__ import annotations

from typing import Any

import click

from meshctl.cli import _output
from meshctl.cli._context import common_options, get_state


def _targets(all_profiles: bool, hermes_home: str | None) -> list[tuple[str, Any]]:
    from meshctl.cli.admin import hermes_install as hi

    state = get_state()
    # Only a --profile typed on the command line names a Hermes profile: MESH_PROFILE
    # in the environment names a mesh, and does not move the command to another home.
    profile = state.profile if "profile" in state.explicit else None
    if all_profiles and (profile is not None or hermes_home):  # SPEC §9: one of the three
        raise click.UsageError("give --all-profiles alone, not with --profile or --hermes-home")
    return hi.homes(profile, all_profiles, hermes_home)


def _mesh_profile(name: str) -> str:
    state = get_state()
    if name != "custom":
        return name
    return state.profile


def _where_options(func: Any) -> Any:
    func = click.option(
        "--hermes-home", metavar="PATH", help="A Hermes home outside the standard place."
    )(func)
    return click.option("--all-profiles", is_flag=True, help="Every Hermes profile.")(func)


@click.group()
@common_options
def hermes() -> None:
    """Install the Session Mesh plugin into Hermes Agent profiles (see README)."""


@hermes.command()
@_where_options
@common_options
def install(all_profiles: bool, hermes_home: str | None) -> None:
    """Place the plugin in $HERMES_HOME/plugins/meshd/ and enable it.

    \b
    Examples:
      meshctl hermes install
      meshctl hermes install --all-profiles
    """
    from meshctl._spawn import daemon_running
    from meshctl.cli.admin import hermes_install as hi

    state = get_state()
    done = []
    for name, home in _targets(all_profiles, hermes_home):
        try:
            done.append(hi.install(name, home, _mesh_profile(name), state.socket))
        except hi.InstallError as exc:
            raise _output.Failure(str(exc), "HERMES_INSTALL") from exc
    for d in done:
        d["daemon_reachable"] = bool(daemon_running(d["profile"], d["socket"]))

    def human() -> str:
        lines = []
        for d in done:
            was = f" (was {d['previous_version']})" if d["previous_version"] else ""
            on = "enabled" if d["enabled"] else "NOT enabled"
            seen = f"; Hermes lists it as {d['hermes_sees']}" if d.get("hermes_sees") else ""
            lines.append(
                f"Installed meshd {d['version']}{was} in {d['path']}; {on} "
                f"(in {d['hermes_home']}/config.yaml{seen}); mesh profile {d['profile']}."
            )
        lines.append("New Hermes sessions join the mesh; restart a running gateway.")
        idle = {(d["profile"], d["socket"]) for d in done if not d["daemon_reachable"]}
        lines += [_start_hint(profile, socket) for profile, socket in sorted(idle, key=str)]
        return "\n".join(lines)

    _output.emit(state.json, done, human)


def _install_for(r: dict[str, Any]) -> str:
    """The command that installs the plugin in row ``r``'s Hermes profile."""
    if r["hermes_profile"] == "custom":
        return f"meshctl hermes install --hermes-home {r['hermes_home']}"
    flag = "" if r["hermes_profile"] == "default" else f" --profile {r['hermes_profile']}"
    return "meshctl hermes install" + flag


def _start_hint(profile: str, socket: str | None) -> str:
    """How to start the daemon a Hermes profile's sessions talk to (the plugin never does:
    a Kanban worker or a second profile's chat would otherwise stay off the mesh unseen)."""
    where = f" --socket {socket}" if socket else ""
    return (
        f"meshd for mesh profile {profile} is not running, and Hermes never starts it: "
        f"`meshctl daemon start --profile {profile}{where}` (or `meshctl service install "
        f"--profile {profile}` to have it from login on)."
    )


@hermes.command()
@_where_options
@common_options
def uninstall(all_profiles: bool, hermes_home: str | None) -> None:
    """Remove the plugin meshctl installed (foreign plugins and config stay).

    \b
    Examples:
      meshctl hermes uninstall --all-profiles
    """
    from meshctl.cli.admin import hermes_install as hi

    state = get_state()
    done = []
    for name, home in _targets(all_profiles, hermes_home):
        try:
            done.append(hi.uninstall(name, home))
        except hi.InstallError as exc:
            raise _output.Failure(str(exc), "HERMES_INSTALL") from exc

    def human() -> str:
        return "\n".join(
            f"{d['hermes_home']}: "
            + ("removed the meshd plugin" if d["removed"] else "no meshd plugin installed")
            + ("; taken out of plugins.enabled" if d["disabled"] else "")
            for d in done
        )

    _output.emit(state.json, done, human)


@hermes.command()
@_where_options
@common_options
def status(all_profiles: bool, hermes_home: str | None) -> None:
    """Per profile: installed, enabled, version matches, daemon reachable.

    \b
    Examples:
      meshctl hermes status --json
    """
    from meshctl._spawn import daemon_running
    from meshctl.cli.admin import hermes_doctor
    from meshctl.cli.admin import hermes_install as hi

    state = get_state()
    rows = [
        hi.status(name, home, daemon_running) for name, home in _targets(all_profiles, hermes_home)
    ]
    ep = hermes_doctor.entry_point_on_path()
    everywhere = [] if ep else [  # every profile, for the cloned ones (files only)
        r for name, home in hi.homes(all_profiles=True) if home.is_dir()
        if (r := hi.status(name, home, lambda p, s: None))["missing_folder"]
    ]  # fmt: skip

    def human() -> str:
        lines = []
        for r in rows:
            if r["foreign"]:
                state_ = "a plugin named meshd that meshctl did not install"
            elif r["missing_folder"] and not ep:
                state_ = (
                    "enabled in config.yaml, but the plugin folder is missing (a profile "
                    f"cloned from one that has it?): run `{_install_for(r)}`"
                )
            elif not r["installed"]:
                state_ = "not installed"
            else:
                state_ = f"installed {r['version']}" + (
                    f" — OUTDATED (session-mesh is {r['current_version']}; run "
                    "`meshctl hermes install` again)"
                    if r["outdated"]
                    else ""
                )
                state_ += ", enabled" if r["enabled"] else ", NOT enabled"
                state_ += (
                    ", daemon reachable"
                    if r["daemon_reachable"]
                    else f", daemon NOT reachable (profile {r['profile']})"
                )
            lines.append(f"{r['hermes_profile']} ({r['hermes_home']}): {state_}")
            if r["installed"] and not r["daemon_reachable"]:
                lines.append("  " + _start_hint(r["profile"], r["socket"]))
        shown = {r["hermes_home"] for r in rows}
        if cloned := [r for r in everywhere if r["hermes_home"] not in shown]:
            lines.append(
                "Other Hermes profiles enable meshd but have no plugin folder (cloned?): "
                + "; ".join(f"{r['hermes_profile']}: `{_install_for(r)}`" for r in cloned)
            )
        return "\n".join(lines)

    _output.emit(state.json, rows, human)
