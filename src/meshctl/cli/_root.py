"""The root ``meshctl`` group: one place that turns every failure into output and an exit code.

Imported by :func:`meshctl.cli.main` when the command line is not one the fast
path (:mod:`meshctl.cli._fast`) takes, and by whatever wants the click tree
(``from meshctl.cli import cli``: tests, completion, docs generation).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any, cast

import click

from meshctl._core import env as _env
from meshctl.cli import _output
from meshctl.cli._context import Group, State, common_options
from meshd import __version__
from meshd.protocol.errors import MeshError

CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


#: Top-level commands, imported only when used: a command pays for its own module
#: alone (``--help`` and completion load them all).
COMMANDS: dict[str, str] = {
    "board": "meshctl.cli.board:board",
    "broadcast": "meshctl.cli.messages:broadcast",
    "call": "meshctl.cli.raw:call",
    "check": "meshctl.cli.claims:check",
    "claim": "meshctl.cli.claims:claim",
    "claude": "meshctl.cli.claude:claude",
    "completion": "meshctl.cli.completion:completion",
    "daemon": "meshctl.cli.daemon:daemon",
    "doctor": "meshctl.cli.doctor:doctor",
    "end": "meshctl.cli.lifecycle:end",
    "fleet": "meshctl.cli.fleet:fleet",
    "handoff": "meshctl.cli.handoff:handoff",
    "heartbeat": "meshctl.cli.lifecycle:heartbeat",
    "hermes": "meshctl.cli.hermes:hermes",
    "import": "meshctl.cli.importer:import_",
    "inbox": "meshctl.cli.inbox:inbox",
    "job": "meshctl.cli.jobs:job",
    "jobs": "meshctl.cli.jobs:jobs",
    "log": "meshctl.cli.claims:log_",
    "mcp": "meshctl.cli.mcp:mcp",
    "notes": "meshctl.cli.notes:notes",
    "once": "meshctl.cli.once:once",
    "pause": "meshctl.cli.preempt:pause",
    "preempt": "meshctl.cli.preempt:preempt",
    "prioritize": "meshctl.cli.sessions:prioritize",
    "register": "meshctl.cli.lifecycle:register",
    "release": "meshctl.cli.claims:release",
    "reply": "meshctl.cli.messages:reply",
    "resume": "meshctl.cli.preempt:resume",
    "run": "meshctl.cli.run:run",
    "send": "meshctl.cli.messages:send",
    "service": "meshctl.cli.service:service",
    "sessions": "meshctl.cli.sessions:sessions",
    "signal": "meshctl.cli.signal:signal",
    "steal": "meshctl.cli.claims:steal",
    "sync": "meshctl.cli.sync:sync",
    "top": "meshctl.cli.top:top",
    "validate": "meshctl.cli.claims:validate",
    "whoami": "meshctl.cli.sessions:whoami",
}


def _wants_json(args: Sequence[str]) -> bool:
    """Whether ``--json`` appears among the options (before any ``--``).

    Used only when a usage error stops parsing before ``--json`` was read.
    """
    for arg in args:
        if arg == "--":
            return False
        if arg == "--json":
            return True
    return False


class MeshGroup(Group):
    """The root group: one place that turns every failure into output and an exit code.

    Its commands are listed in :data:`COMMANDS` and imported on first use.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *super().list_commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module_name, _, attr = target.partition(":")
        return cast(click.Command, getattr(importlib.import_module(module_name), attr))

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command line; exit with SPEC §9's code (never returns in standalone mode)."""
        argv = list(sys.argv[1:] if args is None else args)
        prog_name = prog_name or "meshctl"
        complete_var = complete_var or "_MESHCTL_COMPLETE"
        if not standalone_mode:
            return super().main(argv, prog_name, complete_var, False, **extra)
        state = extra.setdefault("obj", State())
        try:
            rv = super().main(argv, prog_name, complete_var, False, **extra)
        except _output.Failure as failure:
            _output.report(failure, state.json)
            sys.exit(failure.exit_code)
        except click.UsageError as exc:
            if state.json or _wants_json(argv):
                _output.write_json(_output.usage_failure(exc).to_json())
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            other = _output.Failure(exc.format_message(), "CLI", exit_code=exc.exit_code)
            _output.report(other, state.json)
            sys.exit(exc.exit_code)
        except (click.Abort, KeyboardInterrupt):
            sys.exit(130)  # the shell's status for SIGINT; the user knows they pressed it
        except BrokenPipeError:
            _output.reader_gone()
            sys.exit(_output.EXIT_ERROR)  # never 0: what was printed may not have been read
        except Exception as exc:  # the last guard: one sentence, never a traceback
            if _env.get("MESHCTL_DEBUG"):
                raise
            _output.report(_output.internal_error(exc), state.json)
            sys.exit(_output.EXIT_ERROR)
        finally:
            state.close()
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        """Invoke the command, turning the client library's errors into :class:`Failure`.

        A relative ``MESH_STATE_DIR``/``MESH_CONFIG`` is a usage error before any
        command runs, as a relative ``MESH_SOCKET`` is (its option refuses it).
        """
        from meshd.protocol.trust import env_path_problem

        if problem := env_path_problem():
            raise click.UsageError(problem, ctx)
        try:
            return super().invoke(ctx)
        except MeshError as exc:
            from meshctl.cli._params import usage_from

            state = ctx.find_object(State)
            usage = usage_from(exc, state.command if state else None)
            raise (usage or _output.from_mesh_error(exc)) from exc


@click.group(cls=MeshGroup, context_settings=CONTEXT_SETTINGS)
@common_options
@click.version_option(__version__, "-V", "--version", prog_name="meshctl")
def cli() -> None:
    """Session Mesh: see, ask and stay out of the way of your other agent sessions.

    Exit codes: 0 done; 75 held or timed out; 1 error; 2 usage error;
    69 daemon unreachable.
    """


__all__ = ["CONTEXT_SETTINGS", "MeshGroup", "cli"]
