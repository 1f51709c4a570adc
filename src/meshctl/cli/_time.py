"""How ``meshctl`` writes and reads times: one style for people, one for scripts.

The daemon sends every time as RFC 3339 UTC (``2026-11-29T14:02:00Z``,
:func:`meshd.protocol.contract.rfc3339`, re-exported here), and
``--json`` passes those through untouched, so scripts always get RFC 3339 UTC.
People get one of two forms, both made here and nowhere else:

- **relative** in listings and sentences: ``3s ago``, ``2m ago``, ``in 20s``
  (:func:`ago`; the units are SPEC §9's ``sessions active`` example's);
- **absolute local time, then relative** in detail views (``sessions show``,
  ``handoff show``, ``daemon status``): ``2026-11-29 15:02:00 CET (3m ago)``
  (:func:`detail`).

``--since`` takes the same values on every command that lists history
(:func:`since_option`, :func:`parse_since`): a duration back from now (``90s``,
``10m``, ``2h``, ``1d``, or plain seconds) or an RFC 3339 time (``Z`` or an
offset; a bare time is UTC). Listings the daemon cannot filter are filtered
here, on the same field the listing shows (:func:`newer`).

Standard library only at import (click is imported by the ``--since`` parts that
use it): this sits on the start-up path of every command, the fast path's too.
"""

from __future__ import annotations

import time

from meshd.protocol.contract import rfc3339

# click and typing are imported where they are used, not here: the hot commands'
# fast path (cli/_fast.py) renders times through this module without loading either.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any, TypeVar

    import click

    F = TypeVar("F", bound=Callable[..., Any])

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
FOREVER = 31_536_000.0
"""The longest ``--since`` duration: a year (the protocol's largest span)."""


# --- reading ------------------------------------------------------------------------


def epoch(value: Any) -> float | None:
    """An RFC 3339 time (``Z`` or ``+hh:mm``) or an epoch number as epoch seconds;
    None when ``value`` is neither (missing, empty, garbled)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str) or not value.strip():
        return None
    from datetime import UTC, datetime

    text = value.strip()
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


# --- writing, for people --------------------------------------------------------------


def age(seconds: float) -> str:
    """A short span: ``3s``, ``42s``, ``2m``, ``1h``, ``3d`` (floored, never negative)."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def duration(seconds: float) -> str:
    """A longer span such as ``3m 12s`` or ``2d 4h``: the two largest units."""
    s = max(0, int(seconds))
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size or (unit == "s" and not parts):
            parts.append(f"{s // size}{unit}")
            s %= size
    return " ".join(parts[:2])


def ago(value: Any, now: float | None = None) -> str:
    """``value`` (RFC 3339 or epoch) relative to now: ``3m ago`` or ``in 20s``;
    ``?`` when there is no time to show."""
    ts = epoch(value)
    if ts is None:
        return "?"
    delta = (time.time() if now is None else now) - ts
    return f"in {age(-delta)}" if delta < -0.5 else f"{age(delta)} ago"


def local(value: Any) -> str:
    """``value`` as the local wall time, zone named: ``2026-11-29 15:02:00 CET``."""
    ts = epoch(value)
    if ts is None:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(ts))


def detail(value: Any, now: float | None = None) -> str:
    """A detail view's time: local wall time, then relative (``… CET (3m ago)``)."""
    if epoch(value) is None:
        return "?"
    return f"{local(value)} ({ago(value, now)})"


# --- --since ----------------------------------------------------------------------------


def parse_since(text: str, now: float | None = None) -> float:
    """A ``--since`` value as epoch seconds: a duration back from ``now`` (``90s``,
    ``10m``, ``2h``, ``1d``, plain seconds) or an RFC 3339 time (bare: UTC)."""
    import click

    now = time.time() if now is None else now
    value = text.strip()
    unit = _UNITS.get(value[-1:].lower(), 0.0)
    try:
        span = float(value[:-1] if unit else value) * (unit or 1.0)
    except ValueError:
        span = None
    if span is not None:
        if not 0 < span <= FOREVER:
            raise click.BadParameter(
                f"{text!r}: a duration must be more than 0 and at most a year",
                param_hint="--since",
            )
        return now - span
    ts = epoch(value)
    if ts is None:
        raise click.BadParameter(
            f"{text!r}: give a duration (90s, 10m, 2h, 1d) or an RFC 3339 time "
            "(2026-11-29T14:02:00Z)",
            param_hint="--since",
        )
    return ts


def _since_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    return None if value is None else parse_since(value)


def since_option(what: str = "entries") -> Callable[[F], F]:
    """The ``--since T`` option of every listing of history: its value reaches the
    command as epoch seconds (or None), parsed by :func:`parse_since`."""
    import click

    return click.option(
        "--since",
        metavar="T",
        callback=_since_callback,
        help=f"Only {what} at or after T: a duration back (10m, 2h, 1d) or an RFC 3339 time.",
    )


def newer(items: Iterable[Mapping[str, Any]], since: float | None, field: str) -> list[Any]:
    """The items whose ``field`` time is at or after ``since`` (all when None); an
    item with no readable time is kept (never hide what cannot be placed)."""
    if since is None:
        return list(items)
    kept = []
    for item in items:
        ts = epoch(item.get(field))
        if ts is None or ts >= since - 0.5:  # times are to the second
            kept.append(item)
    return kept


def oldest_first(items: Iterable[Mapping[str, Any]], field: str) -> list[Any]:
    """``items`` in the one order of every listing: oldest first, newest at the bottom
    (like a log), by their ``field`` time, ties (and items without one) by ``id``."""

    def key(item: Mapping[str, Any]) -> tuple[float, float]:
        ts = epoch(item.get(field))
        ident = item.get("id")
        return (ts if ts is not None else float("inf"),
                float(ident) if isinstance(ident, int | float) else 0.0)  # fmt: skip

    return sorted(items, key=key)


__all__ = [
    "FOREVER",
    "age",
    "ago",
    "detail",
    "duration",
    "epoch",
    "local",
    "newer",
    "oldest_first",
    "parse_since",
    "rfc3339",
    "since_option",
]
