"""The ``[fleet]`` extra (nats-py) as the daemon tells it is missing: one line with the
command that adds it, instead of a ``ModuleNotFoundError`` traceback at every retry.

Standard library only, and it imports nothing of the fleet. The command follows how
session-mesh was installed: pipx and uv tool keep it in a venv of their own, which
``pip install`` in another environment does not reach. ``meshctl fleet join`` and
``meshctl doctor`` name the same command (``meshctl.cli.admin.fleet_extra``, which
imports nothing of the daemon; ``tests/cli/test_fleet_extra.py`` checks the two agree).
"""

from __future__ import annotations

import sys

MODULES = ("nats", "nkeys")
"""The extra's top-level modules (nkeys: creds and nkey logins)."""


def missing_module(exc: BaseException) -> str | None:
    """The extra's module ``exc`` says is not installed (None: another error)."""
    if not isinstance(exc, ModuleNotFoundError):
        return None
    root = (exc.name or "").partition(".")[0]
    return root if root in MODULES else None


def install_hint() -> str:
    """The command that adds the extra to this installation."""
    parts = sys.prefix.replace("\\", "/").split("/")
    if "pipx" in parts and "venvs" in parts:
        return "pipx inject session-mesh 'session-mesh[fleet]'"
    if "uv" in parts and "tools" in parts:
        return "uv tool install --force 'session-mesh[fleet]' (or the path you installed from)"
    return f"{sys.executable} -m pip install 'session-mesh[fleet]'"


def not_installed(module: str) -> str:
    """The daemon's one line for a ``[fleet]`` it cannot load: what lacks, what to run."""
    return (
        f"the [fleet] extra (nats-py) is not installed where meshd runs (no module named "
        f"'{module}'): install it with: {install_hint()}, then `meshctl daemon restart`"
    )
