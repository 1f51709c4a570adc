"""``meshctl top``: a live view of what every agent session is doing.

The view itself (what is read, how it is drawn, the keys) is in
:mod:`meshctl.cli._top`, imported only when top runs (``--help`` stays cheap).
"""

from __future__ import annotations

import sys

import click

from meshctl._core import env as _env
from meshctl.cli import _output
from meshctl.cli._context import common_options, get_state


@click.command()
@common_options
@click.option("--once", is_flag=True, help="Print the view once and exit.")
def top(once: bool) -> None:
    """A live view of sessions, claims, queues, jobs, handoffs and changed files.

    \b
    Keys: q quit, / filter, j/k or arrows move, Enter open a session, Esc back.
    Not a terminal (or TERM=dumb): prints the view again on every change.
    \b
    Examples:
      meshctl top
      meshctl top --once | less
    """
    from meshctl.cli._top import Feed, _full_screen, _plain, fetch, render

    state = get_state()
    if state.json:
        view = fetch(state)
        _output.write_json(view.__dict__)
        return
    if once:
        click.echo("\n".join(render(fetch(state), selected=-1, width=10_000)))
        return
    feed = Feed(state)
    try:
        if sys.stdout.isatty() and _env.get("TERM", "dumb") != "dumb":
            _full_screen(state, feed)
        else:
            _plain(state, feed)
    except KeyboardInterrupt:
        pass
    finally:
        feed.close()
