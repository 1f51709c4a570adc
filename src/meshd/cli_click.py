"""``meshd run [--profile P] [--log-level L]``: the daemon in the foreground (click's tree).

:mod:`meshd.cli`, the entry point, runs a plain ``run`` command line without click,
through the same body (:func:`meshd.cli.serve`); everything else comes here.

For systemd, launchd, tests and ``meshctl``'s auto-start. It parses, sets up
logging, and hands over to :func:`meshd.app.run`; there is no logic here.
Exit status: 0 after a clean shutdown, 1 when it cannot start (the message on
stderr says why: a second daemon for the profile, a bad config file, an unusable
folder or database).
"""

from __future__ import annotations

import click

from meshd import __version__
from meshd.cli import LEVELS, serve


@click.group()
@click.version_option(__version__, prog_name="meshd")
def main() -> None:
    """Session Mesh daemon."""


@main.command()
@click.option(
    "--profile",
    envvar="MESH_PROFILE",
    default="default",
    show_default=True,
    show_envvar=True,
    help="Profile to serve.",
)
@click.option(
    "--log-level",
    type=click.Choice(LEVELS, case_sensitive=False),
    default="info",
    show_default=True,
)
def run(profile: str, log_level: str) -> None:
    """Serve PROFILE in the foreground until SIGTERM or SIGINT."""
    serve(profile, log_level)
