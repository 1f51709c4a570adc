"""The ``meshctl`` logger, with :mod:`logging` imported only when there is something to say.

``import logging`` costs several milliseconds (it pulls in ``traceback``, ``string``,
``threading`` set-up …), and a one-shot ``meshctl`` command that goes well never
logs, so the client library keeps it off the start-up path (BENCH.md: a
one-round-trip command within 2.5x of a stdlib script). Messages go to the
standard ``logging.getLogger("meshctl")``, exactly as a module-level logger would:
host programs configure and capture it as usual.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from typing import Any

NAME = "meshctl"


def _logger() -> Any:
    import logging

    return logging.getLogger(NAME)


def debug(message: str, *args: object) -> None:
    """``logging.getLogger("meshctl").debug``."""
    _logger().debug(message, *args)


def info(message: str, *args: object) -> None:
    """``logging.getLogger("meshctl").info``."""
    _logger().info(message, *args)


def warning(message: str, *args: object) -> None:
    """``logging.getLogger("meshctl").warning``."""
    _logger().warning(message, *args)


def exception(message: str, *args: object) -> None:
    """``logging.getLogger("meshctl").exception`` (call it from an ``except`` block)."""
    _logger().exception(message, *args)
