"""``meshctl doctor``'s fleet line (SPEC §12): not configured, connected, or what the
daemon cannot reach, and the command or file that fixes it.

Looks only at what the daemon says (``fleet.status``, asked by the doctor command): it
never connects to NATS itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

Result = tuple[Literal["ok", "warn", "fail", "skip"], str, str | None]

MIN_NATS = (2, 11)
"""Per-key TTL (the fleet registry) needs nats-server 2.11 or later."""


def _no_module(error: str) -> str:
    """``no module named 'nats'`` out of the daemon's fleet error (either spelling)."""
    import re

    found = re.search(r"no module named '[^']*'", error, re.IGNORECASE)
    return found.group(0).lower() if found else error


def check(st: dict[str, Any] | None, daemon: bool, config: Path) -> Result:
    """The fleet link from the daemon's ``fleet.status`` ``st`` (None: no daemon, when
    not ``daemon``, or one older than the fleet): not configured, connected, or what it
    cannot reach; ``config`` is the file to correct."""
    if st is None:
        if not daemon:
            return "skip", "no daemon to ask about the fleet link", None
        return "skip", "this daemon does not know fleets (older version)", None
    if not st.get("configured"):
        return "ok", "not configured: this host is alone (meshctl fleet join URL to join)", None
    urls = ", ".join(st.get("urls") or [])
    if not st.get("connected") and "no module named" in str(st.get("last_error")).lower():
        from meshctl.cli.admin import fleet_extra

        return (
            "fail",
            f"[fleet] is configured but the daemon cannot load the fleet client "
            f"({_no_module(str(st.get('last_error')))}); this host's mesh works alone meanwhile",
            f"install the [fleet] extra: {fleet_extra.install_hint()}, then "
            f"`meshctl daemon restart`; or `meshctl fleet leave`",
        )
    if not st.get("connected"):
        why = st.get("last_error") or "no answer yet"
        return (
            "fail",
            f"cannot reach the fleet at {urls}: {why}; this host's mesh works alone meanwhile",
            f"start nats-server there with JetStream (docs/FLEET.md), or correct url/creds in "
            f"[fleet] of {config} and run `meshctl daemon reload`, or `meshctl fleet leave`",
        )
    version = str(st.get("server_version") or "0.0.0")
    try:
        have = tuple(int(x) for x in version.split(".")[:2])
    except ValueError:
        have = (0, 0)
    if have < MIN_NATS:
        return (
            "fail",
            f"nats-server {version} at {st.get('server')} has no per-key TTL (needs 2.11+)",
            "upgrade nats-server (docs/FLEET.md)",
        )
    hosts = st.get("hosts") or []
    stale = [h["host"] for h in hosts if h.get("stale")]
    message = (
        f"connected to {st.get('server')} (nats-server {version}) as host {st.get('host')}; "
        f"{len(hosts)} other host{'s' if len(hosts) != 1 else ''} seen"
        + (f" ({', '.join(stale)} stale)" if stale else "")
    )
    clash = (st.get("parts") or {}).get("registry", {}).get("name_clash")
    if clash:
        return (
            "warn",
            f"{message}; another meshd writes under this host's name {st.get('host')}",
            f"give each host its own name: name = ... in [fleet] of {config}",
        )
    return "ok", message, None
