"""``meshctl daemon logs [-f] [-n N]``: the daemon's log, wherever it is.

A daemon meshctl started itself (detached) writes ``<state>/<profile>.log``; one that
systemd runs (the installed ``meshd@P.service``, or ``meshd-P`` started with
``systemd-run --user``) logs to the user journal. Which one is current: the journal
when one of those units is active now (``systemctl --user is-active``), else the file.
``-f`` follows (the file is read as it grows; the journal through ``journalctl -f``).
Never starts a daemon.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

import click

from meshctl._core import env as _env
from meshctl.cli import _output
from meshctl.cli._context import common_options, get_state

TYPE_CHECKING = False  # --help loads this module: shutil, subprocess, pathlib when run
if TYPE_CHECKING:
    from pathlib import Path


def _active_unit(profile: str) -> str | None:
    """The systemd user unit running this profile's daemon now, if any. Never with
    ``MESH_SOCKET``/``MESH_STATE_DIR`` overrides: those daemons are never systemd's."""
    import shutil
    import subprocess

    if shutil.which("systemctl") is None or _env.get("MESH_SOCKET") or _env.get("MESH_STATE_DIR"):
        return None
    for unit in (f"meshd@{profile}.service", f"meshd-{profile}.service"):
        done = subprocess.run(["systemctl", "--user", "is-active", "--quiet", unit],
                              capture_output=True, check=False, timeout=10)  # fmt: skip
        if done.returncode == 0:
            return unit
    return None


def _tail(path: Path, lines: int) -> int:
    """Print the last ``lines`` lines of ``path``; the offset read up to."""
    with path.open("rb") as f:
        data = f.read()
    text = data.decode(errors="replace").splitlines()[-lines:]
    for line in text:
        _output.echo(_output.safe(line))
    return len(data)


def _follow(path: Path, offset: int) -> None:
    """Print what is appended to ``path`` from ``offset`` on, until Ctrl-C."""
    while True:
        with path.open("rb") as f:
            f.seek(offset)
            chunk = f.read()
        if chunk:
            offset += len(chunk)
            sys.stdout.write(_output.safe(chunk.decode(errors="replace"), multiline=True))
            sys.stdout.flush()
        time.sleep(0.5)


@click.command()
@common_options
@click.option("-f", "--follow", is_flag=True, help="Keep printing what is logged.")
@click.option("-n", "--lines", type=click.IntRange(1, 1_000_000), default=50, show_default=True,
              metavar="N", help="How many of the last lines to print.")  # fmt: skip
def logs(follow: bool, lines: int) -> None:
    """The daemon's log: the file in the state folder, or the user journal when systemd
    runs the daemon.

    \b
    Examples:
      meshctl daemon logs
      meshctl daemon logs -f
    """
    import shutil
    from pathlib import Path

    from meshctl import _paths

    state = get_state()
    unit = _active_unit(state.profile)
    if unit is not None and shutil.which("journalctl"):
        argv = ["journalctl", "--user", "-u", unit, "-n", str(lines), "--no-pager"]
        os.execvp("journalctl", [*argv, "-f"] if follow else argv)
    path = Path(_paths.state_dir_str()) / f"{state.profile}.log"
    if not path.exists():
        raise _output.Failure(
            f"no log for profile {state.profile}: {path} does not exist and no systemd "
            "unit runs its daemon", "NOT_FOUND", data={"path": str(path)},
            hint="a daemon meshctl starts logs there; `meshctl daemon start` starts one",
        )  # fmt: skip
    offset = _tail(path, lines)
    if follow:
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends a follow quietly
            _follow(path, offset)
