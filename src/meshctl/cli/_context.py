"""The options every command takes, and the daemon connection they lead to.

``--profile``, ``--socket``, ``--session`` and ``--json`` are accepted both
before and after the command (``meshctl --json sessions active`` and
``meshctl sessions active --json`` mean the same). Each occurrence writes into
one :class:`State` shared by the whole invocation; a value typed on the command
line wins over the environment (``MESH_PROFILE``, ``MESH_SOCKET``,
``MESH_SESSION``, named explicitly: click's ``auto_envvar_prefix`` would derive
names from Python parameter names), and the innermost command-line value wins
over an outer one.

:class:`State` lives in :mod:`meshctl.cli._state` (no click there: the fast path of
the hot commands builds one too). The client library is imported only when a
command asks for a connection, so ``meshctl --help`` and argument errors cost
click's import and nothing more.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from meshctl.cli import _output
from meshctl.cli._state import State, undecodable
from meshd.protocol import contract

__all__ = [
    "Group",
    "State",
    "common_options",
    "complete_held",
    "complete_paths",
    "complete_sessions",
    "get_state",
]

F = TypeVar("F", bound=Callable[..., Any])


class Group(click.Group):
    """A command group that suggests the closest commands for a mistyped one, and lists
    its commands with their whole summary (wrapped, never cut off with "...")."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            import difflib

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=3, cutoff=0.6)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            ctx.fail(f"No such command '{_output.safe(name)}'.{hint}")
        return super().resolve_command(ctx, args)


def get_state() -> State:
    """The invocation's :class:`State` (created by the root group).

    Called first thing by every command, so it also records which command runs.
    """
    ctx = click.get_current_context()
    state = ctx.ensure_object(State)
    state.command = ctx
    return state


def complete_sessions(ctx: click.Context, param: click.Parameter, incomplete: str) -> Any:
    """Live session ids (shell completion; imported only when completing)."""
    from meshctl.cli._complete import session_ids

    return session_ids(ctx, param, incomplete)


def complete_held(ctx: click.Context, param: click.Parameter, incomplete: str) -> Any:
    """Keys the acting session holds, else paths (shell completion)."""
    from meshctl.cli._complete import held_keys

    return held_keys(ctx, param, incomplete)


def complete_paths(ctx: click.Context, param: click.Parameter, incomplete: str) -> Any:
    """Paths, completed by the shell."""
    from click.shell_completion import CompletionItem

    return [CompletionItem(incomplete, type="file")]


def _store_colour(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:  # given at this level: it stands (the last one given wins)
        from meshctl.cli import _terminal

        _terminal.choice = value


def _store(name: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        state = ctx.ensure_object(State)
        source = ctx.get_parameter_source(param.name or name)
        if source is ParameterSource.COMMANDLINE:
            state.explicit.add(name)
        elif name in state.explicit or (name == "json" and not value):
            return  # an outer explicit value (or an earlier --json) stands
        if name == "profile" and not contract.is_profile(value):
            # named as the value came: click's hint names the option and its variable
            # both, and `--profile 'a b'` read as if MESH_PROFILE were at fault
            came = "MESH_PROFILE" if source is ParameterSource.ENVIRONMENT else "--profile"
            raise click.BadParameter(
                f"{value!r}: {contract.profile_rule(value)}", ctx, param, param_hint=came
            )
        if name == "socket" and value and not os.path.isabs(value):
            raise click.BadParameter(
                f"{value!r}: the socket must be an absolute path (a relative one names a "
                "different socket in every working folder)",
                ctx,
                param,
            )
        if name == "socket" and value and undecodable(value):
            from meshd.protocol.contract import escaped

            raise click.BadParameter(
                f"'{escaped(value)}': the socket's path is not valid UTF-8 (meshd records "
                "and reports its paths as text); choose a path whose name is UTF-8",
                ctx,
                param,
            )
        setattr(state, name, value)

    return callback


def common_options(func: F) -> F:
    """Add ``--profile/--socket/--session/--json`` to a command or group."""
    options = [
        click.option(
            "--profile",
            envvar="MESH_PROFILE",
            default="default",
            show_envvar=True,
            show_default=True,
            expose_value=False,
            callback=_store("profile"),
            metavar="NAME",
            help="Profile whose daemon to talk to.",
        ),
        click.option(
            "--socket",
            envvar="MESH_SOCKET",
            show_envvar=True,
            expose_value=False,
            callback=_store("socket"),
            metavar="PATH",
            help="Daemon socket (default: per profile in the runtime folder).",
        ),
        click.option(
            "--session",
            envvar="MESH_SESSION",
            show_envvar=True,
            expose_value=False,
            callback=_store("session"),
            shell_complete=complete_sessions,
            metavar="ID",
            help="Session to act for (see `meshctl register`).",
        ),
        click.option(
            "--json",
            "json_",
            is_flag=True,
            expose_value=False,
            callback=_store("json"),
            help="Print exactly one JSON document on stdout.",
        ),
        click.option(
            "--color",
            "--colour",
            type=click.Choice(["auto", "always", "never"]),
            expose_value=False,
            callback=_store_colour,
            help="Colour for people: auto (a terminal, and NO_COLOR unset), always, never.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func
