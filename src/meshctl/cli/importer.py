"""``meshctl import session-coord [DB] [--manifest PATH] [--apply]``: switch over in minutes.

Shows what a session-coord board holds (read-only) and its cron manifest as
``[jobs.NAME]`` tables; ``--apply`` appends the tables not yet declared to
``config.toml`` (validated first) and reloads a running daemon. See
docs/FROM-SESSION-COORD.md for the whole mapping.
"""

from __future__ import annotations

from typing import Any

import click

from meshctl.cli import _output
from meshctl.cli._context import common_options, get_state


@click.group("import", context_settings={"help_option_names": ["-h", "--help"]})
@common_options
def import_() -> None:
    """Bring another tool's coordination state over (read-only on its side)."""


def _render(doc: dict[str, Any]) -> str:
    board = doc["board"]
    lines = []
    if board.get("found"):
        lines.append(
            f"session-coord board {board['db']}: {len(board['sessions'])} active sessions, "
            f"{len(board['claims'])} held claims (read only; not imported: live state "
            "starts fresh on the mesh)"
        )
        for c in board["claims"]:
            lines.append(f"  held: {c['resource']} by {c['session_id']} — {c.get('task') or ''}")
    else:
        lines.append(f"no session-coord board at {board['db']}")
    jobs = doc["jobs"]
    if not jobs:
        lines.append(f"no cron manifest entries in {doc['manifest']}")
        return "\n".join(lines)
    lines.append(f"cron manifest {doc['manifest']} as config.toml [jobs] tables:")
    lines.append("")
    lines.extend(doc["toml"].rstrip("\n").splitlines())
    if doc.get("applied") is not None:
        lines.append("")
        added, skipped = doc["applied"], doc["skipped"]
        lines.append(f"added to {doc['config']}: {', '.join(added) or 'nothing'}")
        if skipped:
            lines.append(f"already declared, left as they are: {', '.join(skipped)}")
        lines.append(doc.get("reload") or "")
    else:
        lines.append("")
        lines.append("run again with --apply to add them to config.toml")
    return "\n".join(line for line in lines if line is not None)


@import_.command("session-coord")
@common_options
@click.argument("db", required=False, type=click.Path(dir_okay=False))
@click.option(
    "--manifest",
    type=click.Path(dir_okay=False),
    help="The cron manifest (default: $HERMES_COORD_CRON_MANIFEST or "
    "~/.hermes/state/cron_resources.json).",
)
@click.option("--apply", "do_apply", is_flag=True, help="Append the [jobs] tables to config.toml.")
def session_coord(db: str | None, manifest: str | None, do_apply: bool) -> None:
    """Show a session-coord board and its cron manifest as [jobs]; --apply adds them.

    \b
    Examples:
      meshctl import session-coord
      meshctl import session-coord ~/.hermes/state/session_coordination.db --apply
    """
    from pathlib import Path

    from meshctl.cli.admin import import_coord as ic
    from meshctl.cli.admin.config import config_file

    state = get_state()
    manifest_path = Path(manifest) if manifest else ic.default_manifest()
    try:
        board = ic.read_board(Path(db) if db else ic.default_db())
        jobs = ic.read_manifest(manifest_path) if manifest_path.exists() else []
    except ic.ImportError_ as exc:
        raise _output.Failure(str(exc), "IMPORT_FAILED") from exc
    doc: dict[str, Any] = {
        "board": board,
        "manifest": str(manifest_path),
        "jobs": [j.__dict__ for j in jobs],
        "toml": "\n".join(j.toml() for j in jobs),
        "config": str(config_file()),
        "applied": None,
        "skipped": [],
    }
    if do_apply and jobs:
        try:
            doc["applied"], doc["skipped"] = ic.apply(config_file(), jobs)
        except ic.ImportError_ as exc:
            raise _output.Failure(str(exc), "IMPORT_FAILED") from exc
        doc["reload"] = _reload(state)
    _output.emit(state.json, doc, lambda: _render(doc))


def _reload(state: Any) -> str:
    """Reload a running daemon (never start one) so `meshctl jobs` shows the new jobs."""
    from meshd.protocol.errors import MeshError

    try:
        result = state.call("mesh.reload", autostart=False)
    except MeshError:
        return "no daemon is running: the jobs are read when it starts"
    if result.get("reloaded"):
        return "the running daemon reloaded its config: `meshctl jobs` shows them"
    return f"the daemon refused the new config: {result.get('error')}"
