"""``meshctl register``, ``heartbeat`` and ``end``: a shell script's session (SPEC §4).

``register`` speaks for the process that called it -- its parent, the shell or
agent tool that ran ``meshctl`` -- unless ``--pid`` names another; the default
liveness is ``process``, so the session lives exactly as long as that caller.
``--liveness heartbeat`` without ``--pid`` sends no pid at all: the session is
tied to no process and lives while ``meshctl heartbeat`` keeps it alive. It
prints only the id on stdout, so ``export MESH_SESSION=$(meshctl register …)``
works.

``heartbeat`` succeeds silently (like ``touch``); ``end`` says what it
released. Both act for ``--session``/``MESH_SESSION`` and refuse without one.

The three bodies are in :mod:`meshctl.cli._lifecycle_body` (no click there: the
fast path of the hot commands runs them too); this module holds their options and
help.

When the mesh is switched off (``enabled = false``) these commands still
succeed, as SPEC §2 says, and say ``disabled`` once on stderr.
"""

from __future__ import annotations

import click

from meshctl.cli import _lifecycle_body
from meshctl.cli._context import common_options, get_state
from meshctl.cli._lifecycle_body import STATUSES, register_params
from meshctl.cli._params import Seconds, Whole

__all__ = ["STATUSES", "end", "heartbeat", "register", "register_params"]


def _task(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse a task that says nothing: ``--task "$TASK"`` with the variable unset gives
    one, and the others would read ``— ,`` where the task goes (a reused session's task
    wiped). A usage error; to keep a session's task, leave ``--task`` out."""
    if value is not None and not value.strip():
        raise click.UsageError(
            "--task is empty: say in a few words what this session does (the others "
            "see it in `meshctl sessions active`)",
            ctx,
        )
    return value


@click.command()
@common_options
@click.option(
    "--task",
    required=True,
    metavar="T",
    callback=_task,
    help="What this session does (≤ 200 chars, not empty).",
)
@click.option("--source", metavar="S", help="cli, cron, shell, worker … (daemon default: shell).")
@click.option(
    "--pid",
    type=Whole(min=1),
    metavar="P",
    help="Process the session lives with (default: the caller of meshctl).",
)
@click.option("--id", "session_id", metavar="ID", help="Choose the id (default: generated).")
@click.option(
    "--liveness",
    type=click.Choice(["process", "heartbeat"]),
    default="process",
    show_default=True,
    help="Live with a process, or while heartbeats come.",
)
@click.option(
    "--expire-after",
    type=Seconds(open_min=True),
    metavar="S",
    help="Heartbeat sessions: expire after S seconds without one.",
)
@click.option("--parent", metavar="ID", help="Parent session (subagents, workers).")
@click.option("--slot", metavar="X", help="This child's slot under --parent.")
@click.option(
    "--no-queries", "queries", is_flag=True, flag_value=False, default=True, help="Refuse asks."
)
@click.option(
    "--no-messages",
    "messages",
    is_flag=True,
    flag_value=False,
    default=True,
    help="Refuse messages.",
)
@click.option("--status", type=click.Choice(STATUSES), help="Initial status (default idle).")
@click.option(
    "--replace",
    is_flag=True,
    help="Take over a live heartbeat session with no process under --id (it ends; "
    "its private notes stay its own).",
)
def register(
    *,
    task: str,
    source: str | None,
    pid: int | None,
    session_id: str | None,
    liveness: str,
    expire_after: float | None,
    parent: str | None,
    slot: str | None,
    queries: bool,
    messages: bool,
    status: str | None,
    replace: bool,
) -> None:
    """Register a session for the calling process; print its id.

    \b
    Typical use in a script:
      export MESH_SESSION=$(meshctl register --task "nightly import")

    \b
    Examples:
      export MESH_SESSION=$(meshctl register --task 'refactor auth')
      meshctl register --task 'nightly import' --source cron --liveness heartbeat --json
    """
    for given, option, otherwise in (
        (session_id, "--id", "leave --id out to get a generated id"),
        (parent, "--parent", "leave --parent out for a session with no parent"),
    ):
        if given is not None and not given.strip():  # ``--id "$ID"`` with ID unset
            raise click.BadParameter(f"must not be empty ({otherwise})", param_hint=option)
    if slot is not None and parent is None:
        raise click.UsageError("--slot needs --parent (a slot is a place under a parent)")
    if expire_after is not None and liveness != "heartbeat":
        raise click.UsageError(
            "--expire-after needs --liveness heartbeat (a process session lives exactly "
            "as long as its process)"
        )
    _lifecycle_body.register(
        get_state(),
        task=task,
        source=source,
        pid=pid,
        session_id=session_id,
        liveness=liveness,
        expire_after=expire_after,
        parent=parent,
        slot=slot,
        queries=queries,
        messages=messages,
        status=status,
        replace=replace,
    )


@click.command()
@common_options
@click.option("--status", type=click.Choice(STATUSES), help="What the session is doing now.")
@click.option("--task", metavar="T", callback=_task, help="A new task line (not empty).")
def heartbeat(status: str | None, task: str | None) -> None:
    """Say the session is still here (and, optionally, its status or task).

    \b
    Examples:
      meshctl heartbeat
      meshctl heartbeat --status tool-running --task 'running tests'
    """
    _lifecycle_body.heartbeat(get_state(), status=status, task=task)


@click.command()
@common_options
@click.option("--handoff", metavar="TEXT", help="Leave a final handoff for whoever picks it up.")
def end(handoff: str | None) -> None:
    """End the session: release its claims, optionally leave a handoff.

    \b
    Examples:
      meshctl end
      meshctl end --handoff 'auth half done; see notes'
    """
    _lifecycle_body.end(get_state(), handoff=handoff)
