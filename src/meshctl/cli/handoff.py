"""``meshctl handoff request|write|list|show`` (SPEC §6, §9).

A handoff is a durable record of work handed over: who wrote it, for whom (or
for whoever comes next), a summary, files, branch and next steps. Shown to a
person, it is framed as coming from another session of the same user.

Decisions:

- ``write TEXT… --files F… --next STEP…``: ``--files`` and ``--next`` take
  several values each, up to the next option (``--files a.py b.py --branch x``);
  so put TEXT first, or repeat the option (``--files a.py --files b.py``).
- ``request ID`` is an ask: the answer (live, or the status responder's) is
  stored as a handoff addressed to the requester, and printed. Exit 75 when
  ID's live responder did not answer in time, as for ``sessions ask``.
- ``list`` acts for the session (to me, by me, unaddressed) and needs one;
  ``list --all`` and ``show`` do not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from meshctl.cli import _output, _time
from meshctl.cli._context import Group, State, common_options, complete_sessions, get_state
from meshctl.cli._params import Seconds, Whole
from meshctl.cli.messages import indent, label
from meshd.protocol.errors import NotFound

Handoff = Mapping[str, Any]

#: Options of ``handoff write`` that take several values, up to the next option.
VARIADIC = ("--files", "--next")


def expand_variadic(args: Sequence[str], names: Sequence[str] = VARIADIC) -> list[str]:
    """``--files a b --x`` -> ``--files a --files b --x``; untouched after ``--``.

    An option given no value is kept as typed, so click says it needs one.
    """
    out: list[str] = []
    current: str | None = None
    given = 0
    for i, arg in enumerate(args):
        if arg == "--":
            out.extend(args[i:])
            break
        if current is not None and not arg.startswith("-"):
            out.extend((current, arg))
            given += 1
            continue
        if current is not None and not given:
            out.append(current)
        current, given = (arg, 0) if arg in names else (None, 0)
        if current is None:
            out.append(arg)
    else:
        if current is not None and not given:
            out.append(current)
    return out


class VariadicCommand(click.Command):
    """A command whose :data:`VARIADIC` options take several values each."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, expand_variadic(args))


# --- rendering (pure) -------------------------------------------------------------------


def summary_line(h: Handoff, width: int = 80, me: str | None = None) -> str:
    """One handoff in a listing: id, frame, addressee, time, the summary's first line."""
    first = str(h.get("summary") or "").splitlines()[0:1]
    text = first[0] if first else ""
    if len(text) > width:
        text = text[: width - 1] + "…"
    to = f" for {h['to']}" if h.get("to") else " for whoever comes next"
    extra = []
    if files := h.get("files"):
        extra.append(f"{len(files)} file(s)")
    if steps := h.get("next_steps"):
        extra.append(f"{len(steps)} next step(s)")
    if h.get("by_status"):
        extra.append("written by the mesh from what it reported")
    more = f" ({', '.join(extra)})" if extra else ""
    who = label(str(h.get("from", "?")), me)
    return f"- #{h.get('id')} {who}{to}, {_time.ago(h.get('created_at'))}: {text}{more}"


def render_handoff(h: Handoff, me: str | None = None) -> str:
    """A whole handoff for ``show`` and ``request``."""
    to = f" for {h['to']}" if h.get("to") else " for whoever comes next"
    who = label(str(h.get("from", "?")), me)
    lines = [f"Handoff #{h.get('id')} {who}{to}, {_time.detail(h.get('created_at'))}:"]
    lines.append(indent(str(h.get("summary") or "")))
    if files := h.get("files"):
        lines.append("  files: " + ", ".join(str(f) for f in files))
    if branch := h.get("branch"):
        lines.append(f"  branch: {branch}")
    if steps := h.get("next_steps"):
        lines.append("  next steps:")
        lines.extend(f"    - {s}" for s in steps)
    return "\n".join(lines)


def render_list(handoffs: Sequence[Handoff], *, every: bool, me: str | None = None) -> str:
    if not handoffs:
        return "No handoffs." if every else "No handoffs for you, by you, or unaddressed."
    head = "Handoffs:" if every else "Handoffs for you, by you, or unaddressed:"
    return "\n".join([head, *(summary_line(h, me=me) for h in handoffs)])


def render_request(result: Mapping[str, Any], to: str) -> str:
    if result.get("timed_out"):
        how = f"{to}'s live responder did not answer in time; written from what {to} reported"
    elif result.get("answered_by") == "session":
        how = f"written by {to}"
    else:
        how = f"{to} has no live responder; written from what {to} reported"
    return f"{render_handoff(result.get('handoff') or {})}\n({how}; saved for you)"


#: Handoffs one ``handoff.list`` call asks for: the protocol's largest page.
_PAGE = 1000


def _every_page(state: State, params: dict[str, Any]) -> list[Handoff]:
    """Every handoff ``handoff.list`` has for ``params``, newest first, page by page
    (SPEC §6: the list shows every one, not the newest page)."""
    found: list[Handoff] = []
    while True:
        page = list(state.call("handoff.list", {**params, "limit": _PAGE}).get("handoffs") or [])
        found.extend(page)
        if len(page) < _PAGE:
            return found
        params = {**params, "before": min(int(h["id"]) for h in page)}


# --- commands ---------------------------------------------------------------------------


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@common_options
def handoff() -> None:
    """Durable handoffs: leave one, ask a session for one, list and show them."""


@handoff.command(cls=VariadicCommand)
@common_options
@click.argument("text", metavar="TEXT…", nargs=-1, required=True)
@click.option("--to", metavar="ID", help="For this session (default: whoever comes next).")
@click.option("--files", multiple=True, metavar="F…", help="Files involved (several allowed).")
@click.option("--branch", metavar="B", help="The branch the work is on.")
@click.option("--next", "next_steps", multiple=True, metavar="STEP…", help="Next steps.")
def write(
    text: tuple[str, ...],
    to: str | None,
    files: tuple[str, ...],
    branch: str | None,
    next_steps: tuple[str, ...],
) -> None:
    """Leave a durable handoff: what was done, which files and branch, what is next.

    --files and --next take several values, up to the next option.

    \b
    Examples:
      meshctl handoff write 'auth half done' --to cli:20261129-1f3a9c --next 'fix tests'
    """
    state = get_state()
    params: dict[str, Any] = {"session_id": state.require_session(), "summary": " ".join(text)}
    if to:  # the daemon keeps a handoff for any id: a typo would wait for nobody
        from meshctl.cli._ids import check_live

        to = check_live(state, to)
    optional = {"to": to, "files": list(files), "branch": branch, "next_steps": list(next_steps)}
    params.update({k: v for k, v in optional.items() if v})
    result = state.call("handoff.write", params)
    to_text = f" for {result['to']}" if result.get("to") else ""
    _output.emit(state.json, result, f"Handoff #{result.get('id')} saved{to_text}.")


@handoff.command()
@common_options
@click.argument("to", metavar="ID", shell_complete=complete_sessions)
@click.option(
    "--timeout",
    type=Seconds(open_min=True),
    default=10.0,
    show_default=True,
    metavar="S",
    help="Wait at most S for ID's answer.",
)
def request(to: str, timeout: float) -> int:
    """Ask session ID for a handoff; it is saved addressed to you, and printed.

    Exit 75 when ID's live responder did not answer in time (a handoff written
    from what ID reported is saved and printed instead).

    \b
    Examples:
      meshctl handoff request cli:20261129-1f3a9c --timeout 60
    """
    state = get_state()
    params = {"session_id": state.require_session(), "to": to, "timeout": timeout}
    from meshctl.cli._waiting import ran_out, session_detail, waiting

    shown = min(timeout, state.mesh().query_cap())  # the daemon waits no longer (SPEC §2)
    with waiting(f"asking {to} for a handoff", shown, session_detail(state.mesh(), to)):
        result = state.call("handoff.request", params, timeout=timeout + state.mesh().timeout)
    if result.get("timed_out"):
        what = f"{to} did not answer; the handoff is written from what {to} reported"
        ran_out(timeout, what, result.get("elapsed_s"))
    hid = (result.get("handoff") or {}).get("id")
    _output.hand_over(
        state.json,
        result,
        lambda: render_request(_output.clean(result), to),
        f"handoff #{hid} is saved; read it: meshctl handoff show {hid}",
    )
    return _output.EXIT_TEMPFAIL if result.get("timed_out") else _output.EXIT_OK


@handoff.command(name="list")
@common_options
@click.option("--all", "every", is_flag=True, help="Every handoff, not only yours.")
@_time.since_option("handoffs")
def list_(every: bool, since: float | None) -> None:
    """Handoffs for you, by you and unaddressed ones (--all: every one), newest last.

    \b
    Examples:
      meshctl handoff list
      meshctl handoff list --all --since 1d
    """
    state = get_state()
    params: dict[str, Any] = {"all": True} if every else {"session_id": state.require_session()}
    found = _time.newer(_every_page(state, params), since, "created_at")
    found = _time.oldest_first(found, "created_at")
    _output.emit(
        state.json, found, lambda: render_list(_output.clean(found), every=every, me=state.session)
    )


@handoff.command()
@common_options
@click.argument("handoff_id", metavar="HID", type=Whole(min=1))
def show(handoff_id: int) -> None:
    """One handoff in full.

    \b
    Examples:
      meshctl handoff show 7
    """
    state = get_state()
    try:
        result = state.call("handoff.show", {"id": handoff_id})
    except NotFound as exc:  # SPEC §9: exit 1, "the message says what and what to do"
        raise _output.Failure(
            str(exc), "NOT_FOUND", code=exc.code, data=dict(exc.data),
            hint="list the handoffs with `meshctl handoff list --all`",
        ) from exc  # fmt: skip
    _output.emit(state.json, result, lambda: render_handoff(_output.clean(result), state.session))
