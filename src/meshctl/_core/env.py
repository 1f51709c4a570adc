"""The environment variables the client library reads, in one place.

================== ==============================================================
``MESH_PROFILE``   the profile a client uses when none is given (else ``default``)
``MESH_SOCKET``    the socket to use (absolute), instead of the standard location
``MESH_STATE_DIR`` the state folder (absolute): logs, the recorded socket, locks
``MESH_CONFIG``    the config file a daemon the client starts loads (absolute)
``MESH_SPAWN``     ``direct``: start a daemon as a child process, never via systemd
``MESH_HERMES_TIMEOUT`` seconds the Hermes plugin waits for one reply (its hooks)
``MESH_HERMES_TOOLS`` the Hermes plugin's tool set (``compact`` or ``full``)
``XDG_RUNTIME_DIR`` where sockets live, ``XDG_STATE_HOME`` where state lives
                   (platformdirs' rules, mirrored by :mod:`meshctl._paths`)
================== ==============================================================

The commands read a few more, listed in :data:`COMMANDS`: each through :func:`get`
(or :func:`isset`), so this module is the one place that reads ``os.environ`` in
``meshctl`` (the Hermes plugin keeps its own, as it runs inside Hermes).

A client reads them once, when it is made (:meth:`Environment.read`), and passes
what it needs down. What a daemon the client starts must know -- the socket the
client was given, by argument or ``MESH_SOCKET``, and the state and config
overrides -- goes into that daemon's own environment (:meth:`Environment.for_daemon`),
never into this process's ``os.environ``. Standard library only.
"""

from __future__ import annotations

import os

#: Every variable the library reads.
NAMES = (
    "MESH_PROFILE",
    "MESH_SOCKET",
    "MESH_STATE_DIR",
    "MESH_CONFIG",
    "MESH_SPAWN",
    "MESH_HERMES_TIMEOUT",
    "MESH_HERMES_TOOLS",
    "XDG_RUNTIME_DIR",
    "XDG_STATE_HOME",
)
#: What the commands read besides (``meshctl``, its admin commands, the MCP server,
#: the Claude Code hook), and what for.
COMMANDS = {
    "MESH_SESSION": "the session a command acts as (``meshctl run`` sets it for COMMAND)",
    "MESHCTL_DEBUG": "set: tracebacks instead of one-line errors",
    "_MESHCTL_COMPLETE": "set by click's shell completion while it completes",
    "NO_COLOR": "set and not empty: no colour (no-color.org)",
    "TERM": "``dumb``: no colour, ``top`` does not redraw",
    "SHELL": "the shell ``completion`` installs for when none is named",
    "XDG_CONFIG_HOME": "where ``service install`` and ``completion`` write (~/.config)",
    "XDG_DATA_HOME": "where ``completion`` writes (~/.local/share)",
    "MESH_SERVICE_MANAGER": "``none``: ``service`` writes its files and starts nothing",
    "HERMES_HOME": "the Hermes home the ``hermes`` commands act on",
    "HERMES_COORD_DB": "the coordination database ``import`` reads",
    "HERMES_COORD_CRON_MANIFEST": "the cron manifest ``import`` reads",
    "CLAUDE_CONFIG_DIR": "Claude Code's folder for ``claude install --user`` (~/.claude)",
    "MESH_HOOK_TIMEOUT": "seconds the Claude Code hook waits for the daemon",
}
#: The ones a daemon the client starts is given (its environment, or systemd-run's).
PASSED = ("MESH_SOCKET", "MESH_STATE_DIR", "MESH_CONFIG")


def get(name: str, default: str = "") -> str:
    """One variable of :data:`NAMES` or :data:`COMMANDS` now (``default`` when unset):
    with :func:`isset`, the only read of ``os.environ`` in ``meshctl`` (the path rules,
    which :mod:`meshd.paths` shares, ask per call)."""
    return os.environ.get(name, default)


def isset(name: str) -> bool:
    """Whether the variable is set at all (an empty one counts: it overrides too)."""
    return name in os.environ


def child(**overrides: str) -> dict[str, str]:
    """The whole environment of a child process: this process's, with ``overrides``."""
    return {**os.environ, **overrides}


class Environment:
    """The library's variables as they were when a client was made."""

    __slots__ = ("values",)

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    @classmethod
    def read(cls) -> Environment:
        """The variables now (an empty one kept: set, it still overrides)."""
        return cls({name: get(name) for name in NAMES if isset(name)})

    @property
    def profile(self) -> str:
        """``MESH_PROFILE``, or ""."""
        return self.values.get("MESH_PROFILE", "")

    @property
    def socket(self) -> str:
        """``MESH_SOCKET``, or "" (checked absolute where it is used)."""
        return self.values.get("MESH_SOCKET", "")

    @property
    def spawn_direct(self) -> bool:
        """``MESH_SPAWN=direct``: never start the daemon through systemd."""
        return self.values.get("MESH_SPAWN", "auto") == "direct"

    def passed(self, socket: str | None) -> dict[str, str]:
        """What a daemon started for this client must be told: the overrides of
        :data:`PASSED`, with ``socket`` (the client's own, from its argument) as
        ``MESH_SOCKET``."""
        out = {name: self.values[name] for name in PASSED if name in self.values}
        if socket:
            out["MESH_SOCKET"] = socket
        return out

    def for_daemon(self, socket: str | None) -> dict[str, str]:
        """The whole environment of a daemon started directly: this process's, with
        :meth:`passed` over it."""
        return child(**self.passed(socket))
