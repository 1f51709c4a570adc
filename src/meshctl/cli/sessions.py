"""``meshctl sessions active|show``: who is live, and what they are doing.

Human form of ``sessions active`` (SPEC §9 gives an example; this is the rule
behind it), one line a session (wrapped here)::

    Active sessions (profile default):
    - cli:20261129-1f3a9c — refactor auth, in ~/project, branch feat/auth,
      status: tool-running (running tests), 3s ago
    - cron:finance-daily — importing transactions, status: tool-running, 42s ago
    - gateway:telegram:home — waiting for user, last task: summarised IBKR
      runtime status, 2m ago  [stale]

Decisions:

- an id that does not start with its session's source (a Hermes session's id is
  Hermes's own) is followed by the source in brackets, ``20261201_101010_ab12cd
  (gateway:telegram)``, so a CLI and a gateway chat do not look alike; ids that
  say it already (``cli:…``, ``gateway:telegram:home``) are shown as they are;
- the task comes first, as the thing a person scans for ("no task" when empty);
- ``in <cwd>`` (home folder written ``~``) and ``branch <b>`` follow when known;
- ``status: <status>``, with the last reported activity in brackets when the
  daemon has one; a session waiting for its user reads "waiting for user, last
  task: …" instead, as in the example, because its task is then history;
- the age is the time since the last heartbeat, as the daemon computed it
  (``age_s``; its clock, not ours), in the largest whole unit: 3s, 2m, 1h, 2d;
- a stale session (no heartbeat for ``stale_after``) ends in ``  [stale]``;
  ``--fresh`` leaves stale sessions out;
- a ``process`` session is never stale while its process lives (SPEC §4): its
  line ends in how long it has been idle (``idle_s``, from its last activity),
  ``idle 5m``, instead of the heartbeat age;
- other profiles (``--all-profiles``) get a header of their own each;
- in a fleet (SPEC §12) the listing holds every host's sessions, and when they
  are on more than one host each line says ``on <host>`` after the task;
  ``--local`` lists this host's only;
- nothing live: the single line ``No active sessions (profile X).``

``--json`` prints the sessions as ``session.list`` returns them, each with its
``profile``, in one flat list (across profiles with ``--all-profiles``).

The body of ``sessions active`` and its rendering are in
:mod:`meshctl.cli._sessions_body` (no click there: the fast path of the hot
commands runs them too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from meshctl.cli import _output, _sessions_body, _time
from meshctl.cli._context import Group, common_options, complete_sessions, get_state
from meshctl.cli._params import Whole
from meshctl.cli._sessions_body import describe, ranked, render_list

__all__ = [
    "active",
    "describe",
    "prioritize",
    "ranked",
    "render_list",
    "render_one",
    "sessions",
    "show",
]

Session = Mapping[str, Any]


#: The fields of ``sessions show`` that are times: local time, then relative.
TIMES = frozenset({"started_at", "last_heartbeat", "last_activity", "rank_at"})


def render_one(session: Session, home: str | None = None) -> str:
    """``sessions show``: every reported field, one per line, empty ones left out."""
    order = (
        "session_id",
        "profile",
        "source",
        "task",
        "status",
        "cwd",
        "repo",
        "branch",
        "worktree",
        "pid",
        "host",
        "liveness",
        "parent",
        "slot",
        "kanban_task",
        "model",
        "provider",
        "tools",
        "started_at",
        "last_heartbeat",
        "last_activity",
        "accept_queries",
        "accept_messages",
        "rank",
        "rank_by",
        "rank_at",
    )
    lines: list[str] = []
    for key in order:
        value = session.get(key)
        if value in (None, "", []):
            continue
        if key in ("cwd", "repo", "worktree"):
            value = _output.tilde(str(value), home)
        elif key == "tools":
            value = ", ".join(value)
        elif isinstance(value, bool):
            value = "yes" if value else "no"
        elif key in TIMES:
            value = _time.detail(value)
        lines.append(f"{key.replace('_', ' ') + ':':<16} {value}")
    age = _time.age(float(session.get("age_s") or 0))
    lines.append(f"{'seen:':<16} {age} ago" + ("  [stale]" if session.get("stale") else ""))
    claims = session.get("claims") or []
    total = max(int(session.get("claims_total") or 0), len(claims))
    shown = f" (first {len(claims)} shown)" if total > len(claims) else ""
    lines.append(f"{'claims:':<16} {total or 'none'}{shown}")
    for claim in claims:
        reason = f" — {claim['reason']}" if claim.get("reason") else ""
        local = ", local-only" if claim.get("local_only") else ""
        lines.append(
            f"  {claim.get('resource')} ({claim.get('mode')}, token "
            f"{claim.get('token')}{local}, since {_time.ago(claim.get('since'))}){reason}"
        )
    return "\n".join(lines)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@common_options
def sessions() -> None:
    """Live sessions of this profile (and of others that let it see theirs)."""


@sessions.command()
@common_options
@click.option(
    "--all-profiles",
    is_flag=True,
    help="Also list the profiles whose daemons let this one see them.",
)
@click.option("--fresh", is_flag=True, help="Leave out stale sessions.")
@click.option("--local", is_flag=True, help="In a fleet: this host's sessions only.")
def active(all_profiles: bool, fresh: bool, local: bool) -> None:
    """List live sessions: id, task, folder, branch, status, last heard from (in a
    fleet, every host's, each on its host).

    \b
    Examples:
      meshctl sessions active
      meshctl sessions active --fresh --json
      meshctl sessions active --local
    """
    _sessions_body.active(get_state(), all_profiles=all_profiles, fresh=fresh, local=local)


@sessions.command()
@common_options
@click.argument("session_id", metavar="ID", shell_complete=complete_sessions)
def show(session_id: str) -> None:
    """Everything one session reported, and the claims it holds.

    \b
    Examples:
      meshctl sessions show cli:20261129-1f3a9c
    """
    if not session_id:  # the daemon would say none was given to act for (NO_SESSION)
        raise _output.Failure(
            "ID: must not be empty", "INVALID_PARAMS", code=_output.USAGE_CODE,
            exit_code=_output.EXIT_USAGE, data={"path": "$.session_id", "argument": "ID"},
            hint="see `meshctl sessions show --help`; ids: `meshctl sessions active`",
        )  # fmt: skip
    from meshctl.cli._ids import named

    state = get_state()
    info = named(state, session_id)  # the session shown: its end is not the caller's
    _output.emit(state.json, info, lambda: render_one(_output.clean(info)))


@click.command()
@common_options
def whoami() -> None:
    """The session this shell acts for (--session, else MESH_SESSION), as the daemon
    knows it now.

    Exit 1 when there is none, or the daemon no longer knows it (the message says
    how to get one). A prefix of an id is enough (the one live session it names).

    \b
    Examples:
      meshctl whoami
      meshctl whoami --json
    """
    state = get_state()
    sid = state.require_session()
    info = state.call("session.get", {"session_id": sid})
    _output.emit(state.json, info, lambda: _whoami_line(_output.clean(info)))


def _whoami_line(info: dict[str, Any]) -> str:
    """``ID — task, status: S, in ~/p, registered 3m ago`` (one line, for prompts too)."""
    parts = [str(info.get("task") or "no task"), f"status: {info.get('status') or 'idle'}"]
    if cwd := _output.tilde(info.get("cwd")):
        parts.append(f"in {cwd}")
    if info.get("started_at"):
        parts.append(f"registered {_time.ago(info.get('started_at'))}")
    return f"{info.get('session_id')} — {', '.join(parts)}"


# `sessions ask` lives with the other query commands; importing it costs only click.
from meshctl.cli.messages import ask  # noqa: E402

sessions.add_command(ask)


@click.command()
@common_options
@click.argument("session_id", metavar="ID", shell_complete=complete_sessions)
@click.option(
    "--rank",
    type=Whole(-100, 100),
    required=True,
    metavar="N",
    help="-100 to 100 (default of every session: 0). Waiters are served highest first.",
)
def prioritize(session_id: str, rank: int) -> None:
    """Rank a session (a person's command, SPEC §5b): its waits are served before
    those of lower-ranked sessions, FIFO within a rank, re-ordered at once.

    \b
    Examples:
      meshctl prioritize cli:20261129-1f3a9c --rank 10
    """
    import getpass

    state = get_state()
    by = getpass.getuser()  # SPEC §5b: the OS user, even where MESH_SESSION is set
    result = state.call("session.prioritize", {"session_id": session_id, "rank": rank, "by": by})
    _output.emit(
        state.json,
        result,
        lambda: f"{session_id}: rank {result.get('rank')} (was {result.get('previous', 0)})",
    )
