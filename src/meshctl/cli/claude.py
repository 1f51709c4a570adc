"""``meshctl claude install|uninstall|status``: put Claude Code sessions on the mesh.

Install writes Claude Code's hooks (each runs ``meshctl/claude/hook.py``) into its
settings and registers ``meshctl mcp --source claude-code`` as an MCP server, so
every Claude Code session started afterwards joins the mesh and its model gets the
mesh tools. docs/CLAUDE-CODE.md says what each hook does and costs.
"""

from __future__ import annotations

from typing import Any

import click

from meshctl.cli import _output
from meshctl.cli._context import common_options, get_state


def _scope_options(func: Any) -> Any:
    func = click.option(
        "--user", "user", is_flag=True, help="Every project: ~/.claude/settings.json."
    )(func)
    return click.option(
        "--project",
        "project",
        metavar="DIR",
        help="One project: DIR/.claude/settings.local.json (default: the current folder).",
    )(func)


def _check(project: str | None, user: bool) -> None:
    if project and user:
        raise click.UsageError("give --project DIR or --user, not both")


def _profile() -> str | None:
    """The mesh profile to write into the commands: only one named explicitly."""
    state = get_state()
    return state.profile if "profile" in state.explicit else None


@click.group()
@common_options
def claude() -> None:
    """Claude Code's hooks and the mesh MCP server in its settings (docs/CLAUDE-CODE.md)."""


@claude.command()
@_scope_options
@common_options
def install(project: str | None, user: bool) -> None:
    """Add the hooks and the MCP server; uninstall takes out exactly these.

    \b
    Examples:
      meshctl claude install                 # this project, just for you
      meshctl claude install --user          # every project
    """
    from meshctl.cli.admin import claude_install as ci

    _check(project, user)
    state = get_state()
    try:
        done = ci.install(project, user, _profile())
    except ci.InstallError as exc:
        raise _output.Failure(str(exc), "CLAUDE_INSTALL") from exc

    def human() -> str:
        return (
            f"Hooks ({', '.join(done['events'])}) added to {done['settings']}; MCP server "
            f"{done['mcp_server']} registered in {done['mcp_file']}.\n"
            "New Claude Code sessions join the mesh (a running one: restart it)."
        )

    _output.emit(state.json, done, human)


@claude.command()
@_scope_options
@common_options
def uninstall(project: str | None, user: bool) -> None:
    """Take out what install added; your other settings stay as they are.

    \b
    Examples:
      meshctl claude uninstall --user
    """
    from meshctl.cli.admin import claude_install as ci

    _check(project, user)
    state = get_state()
    try:
        done = ci.uninstall(project, user)
    except ci.InstallError as exc:
        raise _output.Failure(str(exc), "CLAUDE_INSTALL") from exc

    def human() -> str:
        return (
            f"{done['settings']}: {done['settings_result']}; MCP server taken out of "
            f"{done['mcp_file']}."
        )

    _output.emit(state.json, done, human)


@claude.command()
@_scope_options
@common_options
def status(project: str | None, user: bool) -> None:
    """Which hooks and whether the MCP server are installed, and whether meshd answers.

    \b
    Examples:
      meshctl claude status --json
    """
    from meshctl._spawn import daemon_running
    from meshctl.cli.admin import claude_install as ci

    _check(project, user)
    state = get_state()
    try:
        row = ci.status(project, user)
    except ci.InstallError as exc:
        raise _output.Failure(str(exc), "CLAUDE_INSTALL") from exc
    row["daemon_reachable"] = bool(daemon_running(state.profile, state.socket))

    def human() -> str:
        hooks = ", ".join(row["hooks"]) if row["hooks"] else "none"
        lines = [f"{row['settings']}: hooks {hooks}"]
        if row["hooks"] and row["missing_hooks"]:
            lines.append(f"  missing: {', '.join(row['missing_hooks'])} (install again)")
        server = "registered" if row["mcp_server"] else "not registered"
        lines.append(f"{row['mcp_file']}: MCP server session-mesh {server}")
        if not row["hook_file_exists"]:
            lines.append(f"  the hook {row['hook_file']} is missing (install again)")
        lines.append("meshd " + ("reachable" if row["daemon_reachable"] else "NOT reachable"))
        return "\n".join(lines)

    _output.emit(state.json, row, human)
