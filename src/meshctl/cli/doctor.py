"""``meshctl doctor [--json]``: one screen that says what works and what to fix.

Never starts a daemon and never changes anything (the checks are in
:mod:`meshctl.cli.admin.doctor`). Exit 0 when nothing failed (warnings allowed, and no daemon
running yet is only information: the first command that needs one starts it), 1 when
a check failed. The last line says "All is well." only when nothing failed or warned,
else what to fix and how many warnings. ``--json`` prints ``{"ok", "profile", "checks":
[{name, status, message, fix}]}`` either way, since the failed checks are the answer,
not an error.
"""

from __future__ import annotations

from typing import Any

import click

from meshctl.cli import _output
from meshctl.cli._context import common_options, get_state

_MARK = {"ok": "ok  ", "info": "info", "warn": "warn", "fail": "FAIL", "skip": "--  "}


def _render(doc: dict[str, Any]) -> str:
    lines = [f"meshctl doctor (profile {doc['profile']}):"]
    name = max([9, *(len(c["name"]) for c in doc["checks"])])  # one column for messages
    for c in doc["checks"]:
        lines.append(f"  [{_MARK[c['status']]}] {c['name']:<{name}} {c['message']}")
        if c["fix"] and c["status"] in ("warn", "fail"):
            lines.append(f"  {'':{name + 8}}fix: {c['fix']}")
    lines.append(_verdict(doc["checks"]))
    return "\n".join(lines)


def _verdict(checks: list[dict[str, Any]]) -> str:
    """The last line: "All is well." only when nothing failed and nothing warned."""
    failed = [c["name"] for c in checks if c["status"] == "fail"]
    warned = [c["name"] for c in checks if c["status"] == "warn"]
    n = len(warned)
    warnings = f"{n} warning{'s' if n > 1 else ''} ({', '.join(warned)})"
    if failed:
        return f"To fix: {', '.join(failed)}." + (f" {warnings}." if warned else "")
    return f"{warnings}; nothing failed." if warned else "All is well."


@click.command()
@common_options
def doctor() -> None:
    """Check the daemon, socket, config, state folder, database, service, fleet
    link and Hermes plugin; say how to fix each fault.

    Exit 0 when no check failed (warnings allowed); no daemon running yet is only
    information, since the first command that needs one starts it. Exit 1 when a
    check failed.

    \b
    Examples:
      meshctl doctor
      meshctl doctor --profile work --json
    """
    from meshctl import _paths, _spawn
    from meshctl.cli.admin import doctor as _doctor
    from meshctl.cli.admin.config import config_file
    from meshd.protocol.errors import MeshError, MeshUnavailable

    state = get_state()
    ctx = _doctor.Context(
        profile=state.profile,
        socket=_spawn.find_socket(state.profile, state.socket),
        state_dir=_paths.state_dir(),
        config=config_file(),
    )
    try:
        ctx.info = state.call("mesh.info", autostart=False)
    except MeshError as exc:
        ctx.info_error = exc.message
        # Nothing listens there (the library's own "not running" error, which names the
        # socket): as `daemon status` tells it from an untrusted or unusable socket.
        ctx.absent = type(exc) is MeshUnavailable and "socket" in exc.data
    else:
        if "fleet" in (ctx.info or {}).get("capabilities", ()):
            try:
                ctx.fleet = state.call("fleet.status", autostart=False)
            except MeshError as exc:
                ctx.fleet = {"configured": True, "connected": False, "last_error": exc.message}
    finally:
        state.close()
    checks = _doctor.run(ctx)
    ok = not any(c.status == "fail" for c in checks)
    doc = {"ok": ok, "profile": state.profile, "checks": _doctor.as_dicts(checks)}
    _output.emit(state.json, doc, lambda: _render(doc))
    if not ok:
        raise SystemExit(1)
