"""Session Mesh for Hermes Agent: the ``meshd`` plugin (tools, ``/mesh``, lifecycle hooks).

Loaded two ways, from this one tree: as a directory plugin that
``meshctl hermes install`` copies to ``$HERMES_HOME/plugins/meshd/`` (with the
blocking client beside it in ``_vendor/``: Hermes's environment has no
session-mesh), or through the ``hermes_agent.plugins`` entry point when
session-mesh is installed in Hermes's environment. Standard library only and
relative imports only, so both work; nothing here starts the daemon, and nothing
here slows Hermes down or fails it when the daemon is gone.
"""

from __future__ import annotations

from typing import Any

#: The plugin's key in Hermes (``plugins.enabled``), for both ways of loading it.
PLUGIN_KEY = "meshd"


def register(ctx: Any) -> None:
    """Hermes's entry: hooks, the ``mesh`` toolset and ``/mesh`` for this process."""
    from ._plugin import setup

    setup(ctx)
