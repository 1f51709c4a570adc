"""``meshctl doctor``'s Hermes line: is the plugin installed, enabled, current, and served.

Looks only (never imports Hermes, never starts a daemon, never writes): the Hermes
homes under the root (``~/.hermes`` and ``profiles/*``, plus a ``HERMES_HOME``
outside it), the ``meshd`` plugin folder and its install record in each,
``plugins.enabled`` in each ``config.yaml``, whether the ``hermes`` on PATH runs in an
environment that has session-mesh (then the ``hermes_agent.plugins`` entry point
loads the plugin too, wherever it is enabled), and whether the daemon each Hermes
profile talks to runs: the plugin never starts one, so a profile whose daemon is
down is off the mesh however well it is installed.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from meshctl._core import env as _env
from meshctl.cli.admin import hermes_install as hi

Reachable = Callable[[str, str | None], bool]
Result = tuple[Literal["ok", "info", "warn", "skip"], str, str | None]


def entry_point_on_path() -> bool | None:
    """Whether the ``hermes`` on PATH runs where session-mesh is installed (None: no
    ``hermes``), from its script's interpreter line and that environment's
    ``site-packages``; nothing is run."""
    exe = shutil.which("hermes")
    if exe is None:
        return None
    try:
        with open(exe, "rb") as f:
            first = f.readline(4096).decode("utf-8", "replace")
    except OSError:
        return False
    if not first.startswith("#!") or not first[2:].split():
        return False
    env = Path(first[2:].split()[0]).parent.parent
    return any(env.glob("lib/python3*/site-packages/session_mesh-*.dist-info"))


def _homes() -> list[tuple[str, Path]]:
    rows = hi.homes(all_profiles=True)
    if _env.get("HERMES_HOME"):  # a home outside the root is one of its own
        rows += [r for r in hi.homes() if r[1] not in {home for _, home in rows}]
    return [(name, home) for name, home in rows if home.is_dir()]


def _flag(r: dict[str, Any]) -> str:
    if r["hermes_profile"] == "custom":
        return f" --hermes-home {r['hermes_home']}"
    return "" if r["hermes_profile"] == "default" else f" --profile {r['hermes_profile']}"


def check(profile: str, reachable: Reachable) -> Result:
    """(status, message, fix) of the ``hermes`` line for mesh profile ``profile``."""
    homes = _homes()
    ep = entry_point_on_path()
    if not homes and ep is None:
        return "skip", "no Hermes Agent here (no ~/.hermes, no hermes on PATH)", None
    rows = [hi.status(name, home, lambda p, s: True) for name, home in homes]
    if foreign := [r for r in rows if r["foreign"]]:
        where = ", ".join(f"{r['hermes_home']}/plugins/meshd" for r in foreign)
        fix = "move it away, then: meshctl hermes install" + _flag(foreign[0])
        return "warn", f"a Hermes plugin named meshd that meshctl did not install: {where}", fix
    problems, fixes = [], []
    for r in rows:
        if r["installed"] and r["outdated"]:
            problems.append(f"Hermes {r['hermes_profile']} has the meshd plugin "
                            f"{r['version']}, session-mesh is {r['current_version']}")  # fmt: skip
            fixes.append("meshctl hermes install" + _flag(r))
        elif r["installed"] and not r["enabled"]:
            problems.append(f"Hermes {r['hermes_profile']} has the meshd plugin, not enabled")
            fixes.append("meshctl hermes install" + _flag(r))
        elif r["missing_folder"] and not ep:
            problems.append(f"Hermes {r['hermes_profile']} enables the meshd plugin but has "
                            "no plugin folder (a cloned profile?)")  # fmt: skip
            fixes.append("meshctl hermes install" + _flag(r))
    if problems:
        return "warn", "; ".join(problems), "; ".join(dict.fromkeys(fixes))
    joined = [r for r in rows if r["enabled"] and (r["installed"] or ep)]
    entry = " (the hermes on PATH also has it as an entry point)" if ep else ""
    if not joined:
        names = ", ".join(r["hermes_profile"] for r in rows) or "none yet"
        return (
            "info",
            (
                f"Hermes Agent is here (profiles: {names}){entry}; the meshd plugin is not "
                "enabled in any, so Hermes sessions are not on the mesh"
            ),
            "meshctl hermes install --all-profiles",
        )
    mine = [r for r in joined if r["profile"] == profile]
    others = sorted({r["profile"] for r in joined} - {profile})
    elsewhere = f"; Hermes profiles also join mesh {', '.join(others)}" if others else ""
    if not mine:
        where = f" (they join mesh {', '.join(others)}: meshctl doctor --profile NAME)"
        return "info", f"no Hermes profile joins mesh {profile}{where}", None
    names = ", ".join(r["hermes_profile"] for r in mine)
    what = f"meshd plugin {mine[0]['current_version']} enabled in Hermes profile {names}{entry}"
    if down := [r for r in mine if not reachable(profile, r["socket"])]:
        where = f" --socket {down[0]['socket']}" if down[0]["socket"] else ""
        return (
            "warn",
            (
                f"{what}, but meshd for mesh {profile} is not running and Hermes never starts "
                f"it: those sessions are not on the mesh{elsewhere}"
            ),
            f"meshctl daemon start --profile {profile}{where} (or: meshctl service install)",
        )
    return "ok", f"{what}: their sessions join this mesh{elsewhere}", None
