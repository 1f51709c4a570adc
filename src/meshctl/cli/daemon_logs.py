"""``meshctl daemon logs [-f] [-n N]``: the daemon's log, wherever it is.

A daemon meshctl started itself (detached) writes ``<state>/<profile>.log``; one that
systemd runs (the installed ``meshd@P.service``, or ``meshd-P`` started with
``systemd-run --user``) logs to the user journal. Which one is current: the journal
when one of those units is active now (``systemctl --user is-active``), else the file.
``-f`` follows (the file is read as it grows; the journal through ``journalctl -f``).
Never starts a daemon.

``--json`` (SPEC §9: one JSON document on stdout): ``{"profile", "source": "file" |
"journal", "path", "unit", "lines": [...]}``, the log's lines as text, undecodable
bytes replaced; with ``-f``, one ``{"line": ...}`` object a line as each is logged (as
``inbox --follow --json``), the last N lines first.
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
from meshctl.cli._params import Whole

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


def _last(path: Path, lines: int) -> tuple[list[str], int]:
    """The last ``lines`` lines of ``path``, and the offset read up to."""
    with path.open("rb") as f:
        data = f.read()
    return data.decode(errors="replace").splitlines()[-lines:], len(data)


def _json_line(line: str) -> None:
    """One log line as one JSON object on a line of its own (``-f --json``)."""
    _output.echo(_output.dump_json({"line": line}))


def _follow(path: Path, offset: int, as_json: bool) -> None:
    """Print what is appended to ``path`` from ``offset`` on, until Ctrl-C."""
    partial = ""
    while True:
        with path.open("rb") as f:
            f.seek(offset)
            chunk = f.read()
        if chunk:
            offset += len(chunk)
            text = chunk.decode(errors="replace")
            if as_json:  # whole lines only: a line may be written in two pieces
                *done, partial = (partial + text).split("\n")
                for line in done:
                    _json_line(line)
            else:
                sys.stdout.write(_output.safe(text, multiline=True))
                sys.stdout.flush()
        time.sleep(0.5)


def _journal_json(argv: list[str], follow: bool, document: dict[str, str | None]) -> None:
    """``journalctl``'s lines (``-o cat``) under ``--json``: one document, or with
    ``-f`` one ``{"line"}`` object a line as they come."""
    import subprocess

    argv = [*argv, "-o", "cat"]
    if not follow:
        done = subprocess.run(argv, capture_output=True, check=False, timeout=60)
        lines = done.stdout.decode(errors="replace").splitlines()
        _output.write_json({**document, "lines": lines})
        return
    with subprocess.Popen([*argv, "-f"], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        try:
            for raw in proc.stdout:
                _json_line(raw.decode(errors="replace").rstrip("\n"))
        finally:
            proc.terminate()


@click.command()
@common_options
@click.option("-f", "--follow", is_flag=True, help="Keep printing what is logged.")
@click.option("-n", "--lines", type=Whole(1, 1_000_000), default=50, show_default=True,
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
        if state.json:
            document = {"profile": state.profile, "source": "journal", "path": None, "unit": unit}
            with contextlib.suppress(KeyboardInterrupt):
                _journal_json(argv, follow, document)
            return
        os.execvp("journalctl", [*argv, "-f"] if follow else argv)
    path = Path(_paths.state_dir_str()) / f"{state.profile}.log"
    if not path.exists():
        raise _output.Failure(
            f"no log for profile {state.profile}: {path} does not exist and no systemd "
            "unit runs its daemon", "NOT_FOUND", data={"path": str(path)},
            hint="a daemon meshctl starts logs there; `meshctl daemon start` starts one",
        )  # fmt: skip
    last, offset = _last(path, lines)
    if state.json and not follow:
        _output.write_json(
            {"profile": state.profile, "source": "file", "path": str(path), "unit": None,
             "lines": last}
        )  # fmt: skip
        return
    for line in last:
        if state.json:
            _json_line(line)
        else:
            _output.echo(_output.safe(line))
    if follow:
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends a follow quietly
            _follow(path, offset, state.json)
