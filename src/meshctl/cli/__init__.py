"""``meshctl``: the command line of Session Mesh (SPEC §9).

The CLI is just another client of the protocol: each command turns its
arguments into one or a few JSON-RPC requests through the blocking client
(:class:`meshctl.Mesh`), and prints the reply for people or, with ``--json``,
as one JSON document. Failures of every kind go through one handler
(:meth:`MeshGroup.main`) so that the exit codes 0/75/1/2/69 and the JSON error
document are the same for every command.

Shell completion is click's: ``eval "$(_MESHCTL_COMPLETE=bash_source meshctl)"``
(``zsh_source``, ``fish_source`` likewise).

Start-up cost matters (BENCH.md: a one-round-trip command within 1.8x of a
stdlib script that sends one request), and ``import click`` alone costs more
than that script. So this module imports nothing: :func:`main` hands the hot
commands (``check``, ``claim``, ``release``, ``heartbeat``, ``sessions active``)
to a click-free fast path (:mod:`meshctl.cli._fast`) that runs the same command
bodies as the click commands, and imports the click tree (:mod:`meshctl.cli._root`)
for every other command line. The client library is imported when a command
first needs the daemon; anyio, msgspec and platformdirs are never imported (a
test checks it). docs/PERFORMANCE.md has the figures and the decision.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from typing import Any

    from meshctl.cli._root import COMMANDS, CONTEXT_SETTINGS, MeshGroup, cli


def main() -> None:
    """Console-script entry point (``meshctl = "meshctl.cli:main"``).

    The fast path runs the hot commands and exits; any other command line (or one
    it does not take: help, a usage error, completion …) goes to click.
    """
    import sys

    from meshctl.cli import _fast

    _fast.main(sys.argv[1:])
    from meshctl.cli._root import cli

    cli.main(prog_name="meshctl")


def __getattr__(name: str) -> Any:
    """The click tree (``cli``, ``MeshGroup``, ``CONTEXT_SETTINGS``, ``COMMANDS``),
    imported on first use."""
    if name in ("cli", "MeshGroup", "CONTEXT_SETTINGS", "COMMANDS"):
        from meshctl.cli import _root

        return getattr(_root, name)
    raise AttributeError(f"module 'meshctl.cli' has no attribute {name!r}")


__all__ = ["COMMANDS", "CONTEXT_SETTINGS", "MeshGroup", "cli", "main"]
