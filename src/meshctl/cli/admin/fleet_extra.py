"""Whether this installation has the ``[fleet]`` extra (nats-py), and how to add it.

The daemon imports nats-py only when a ``[fleet]`` table is configured (SPEC §12),
so an installation without the extra works until someone joins a fleet; then the
daemon's link fails on ``import nats`` and keeps failing. ``meshctl fleet join``
asks here first and changes nothing when the extra is missing, and ``meshctl
doctor`` names the extra instead of suggesting to start nats-server. The daemon
runs from the same installation as meshctl (the service unit and the detached
start both use this installation's interpreter), so this process's view is the
daemon's.

The hint follows how session-mesh was installed: pipx and uv tool keep it in a venv
of their own, which ``pip install`` in another environment does not reach. The daemon
says the same command when its ``[fleet]`` cannot be loaded (:mod:`meshd.fleet.extra`,
kept apart because the command line imports nothing of the daemon beyond the contract;
``tests/cli/test_fleet_extra.py`` checks the two agree).
"""

from __future__ import annotations

import sys


def missing() -> str | None:
    """The module of the extra that is not installed here (None: all there). Found,
    not imported: only :mod:`meshd.fleet` imports nats-py."""
    from importlib.util import find_spec

    for module in ("nats", "nkeys"):  # nkeys: creds and nkey logins
        try:
            found = find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return module
    return None


def install_hint() -> str:
    """The command that adds the extra to this installation."""
    parts = sys.prefix.replace("\\", "/").split("/")
    if "pipx" in parts and "venvs" in parts:
        return "pipx inject session-mesh 'session-mesh[fleet]'"
    if "uv" in parts and "tools" in parts:
        return "uv tool install --force 'session-mesh[fleet]' (or the path you installed from)"
    return f"{sys.executable} -m pip install 'session-mesh[fleet]'"


def refusal(module: str) -> str:
    """One sentence: what is missing, and that nothing was done."""
    return (
        f"joining a fleet needs the [fleet] extra (nats-py), which this installation "
        f"lacks (no module named '{module}'); nothing was changed"
    )
