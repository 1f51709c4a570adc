"""``meshd run [--profile P] [--log-level L]``: the daemon in the foreground.

For systemd, launchd, tests and ``meshctl``'s auto-start. It parses, sets up
logging, and hands over to :func:`meshd.app.run`; there is no logic here.
Exit status: 0 after a clean shutdown, 1 when it cannot start (the message on
stderr says why: a second daemon for the profile, a bad config file, an unusable
folder or database).
"""

from __future__ import annotations

import sys

import click

from meshd import __version__


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
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
)
def run(profile: str, log_level: str) -> None:
    """Serve PROFILE in the foreground until SIGTERM or SIGINT."""
    from meshd import app

    app.setup_logging(log_level)
    try:
        code = app.run(profile)
    except app.StartupError as exc:
        click.echo(f"meshd: {exc}", err=True)
        sys.exit(1)
    sys.exit(code)
