"""``meshctl fleet status|join|leave``: this host in a fleet of hosts (SPEC §12, docs/FLEET.md).

``status`` asks the daemon (``fleet.status``): the link, the server, the other
hosts with how long ago each was heard from, and what holds on this host alone.

``join URL`` and ``leave`` edit the ``[fleet]`` table of config.toml (keeping every
other line, and the table's other keys on join), check the new file with the
daemon's own loader, replace it atomically, and make the running daemon reload
(``mesh.reload``, as SIGHUP): the daemon leaves its old fleet link and opens the
new one without a restart, and local sessions, claims and messages are untouched.
A daemon that refuses the file keeps its old config and the file is put back. With
no daemon running the file is edited and the next start joins.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

import click

from meshctl.cli import _output, _time
from meshctl.cli._context import Group, State, common_options, get_state
from meshd.protocol.errors import MeshUnavailable

if TYPE_CHECKING:
    from pathlib import Path  # imported when a command needs it (start-up cost: --help)

JOIN_WAIT = 5.0
"""Seconds ``join`` waits for the new link to come up before it reports."""


def render_status(st: dict[str, Any], config: Path | None = None) -> str:
    """``fleet status`` for people."""
    if not st.get("configured"):
        where = f" in {config}" if config else ""
        return (
            f"This host is not in a fleet (no [fleet] table{where}).\n"
            "Join one with: meshctl fleet join nats://HOST:4222"
        )
    since = _time.duration(float(st.get("since_s") or 0))
    host = st.get("host")
    if st.get("connected"):
        rtt = f", rtt {st['rtt_ms']:.1f} ms" if st.get("rtt_ms") is not None else ""
        head = (
            f"Fleet: connected to {st.get('server')} (nats-server {st.get('server_version')}"
            f"{rtt}) as host {host}, for {since}"
        )
    else:
        why = f": {st['last_error']}" if st.get("last_error") else ""
        head = (
            f"Fleet: NOT connected (host {host}; trying {', '.join(st.get('urls') or [])} "
            f"for {since}){why}\n  this host's mesh works alone meanwhile"
        )
    lines = [head]
    hosts = st.get("hosts") or []
    lines.append(f"Other hosts seen ({len(hosts)}):" if hosts else "Other hosts seen: none")
    for h in hosts:
        n = int(h.get("sessions") or 0)
        mark = "  [stale]" if h.get("stale") else ""
        lines.append(
            f"- {h.get('host')} — {n} session{'s' if n != 1 else ''}, "
            f"heard from {_time.age(float(h.get('lag_s') or 0))} ago{mark}"
        )
    published = st.get("published_s")
    lines.append(
        "This host's sessions: "
        + (
            "not published yet"
            if published is None
            else f"published {_time.age(float(published))} ago"
        )
    )
    reg = (st.get("parts") or {}).get("registry") or {}
    if st.get("connected") and reg.get("last_error"):
        lines.append(f"  but the last write or read failed: {reg['last_error']}")
    mail = (st.get("parts") or {}).get("mail")
    if mail:
        waiting = int(mail.get("outbox") or 0)
        lines.append(
            f"Mail across hosts: {waiting} waiting to be sent"
            + (" (sent when the link is back)" if waiting and not st.get("connected") else "")
            + f"; {mail.get('published', 0)} sent, {mail.get('taken', 0)} taken in, "
            f"{mail.get('duplicates_dropped', 0)} copies dropped"
        )
    paths = st.get("shared_paths") or []
    lines.append(
        f"Fleet-wide claims: {', '.join(st.get('shared_kinds') or []) or 'none'}"
        + (f"; file: under {', '.join(paths)}" if paths else "")
        + f"; when cut off: {st.get('on_partition')}"
    )
    local_only = st.get("local_only") or []
    lines.append(
        "Local-only now: " + (", ".join(str(x) for x in local_only) if local_only else "nothing")
    )
    return "\n".join(lines)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@common_options
def fleet() -> None:
    """This host in a fleet of hosts joined through NATS (docs/FLEET.md)."""


@fleet.command()
@common_options
def status() -> None:
    """The fleet link, the server, the hosts seen and their lag, what is local-only.

    \b
    Examples:
      meshctl fleet status
      meshctl fleet status --json
    """
    from meshctl.cli.admin.config import config_file

    state = get_state()
    path = config_file()
    st = _status(state, path)
    _output.emit(state.json, st, lambda: render_status(st, path))


def _status(state: State, path: Path) -> dict[str, Any]:
    """``fleet.status`` of the running daemon; with none running, the config file
    answers when it has no ``[fleet]`` table (nothing to start a daemon for: it would
    only say the same). With a table, the daemon is started: it is what joins."""
    if _configured(path):
        return dict(state.call("fleet.status"))
    try:
        return dict(state.call("fleet.status", autostart=False))
    except MeshUnavailable:
        import msgspec

        from meshd.protocol.fleet import FleetStatusResult

        return dict(msgspec.to_builtins(FleetStatusResult(configured=False)))


def _configured(path: Path) -> bool:
    """Whether the file has a ``[fleet]`` table (or cannot be read: the daemon says why)."""
    from meshctl.cli.admin import fleet_config as _fleet_config

    try:
        return _fleet_config.current(_read(path)) is not None
    except (_fleet_config.FleetConfigError, _output.Failure):
        return True


def _edit(state: State, new_text: str | None, path: Path) -> dict[str, Any]:
    """Check ``new_text`` with the daemon's loader, put it in place, reload the daemon.

    ``new_text`` None: nothing to change. Returns ``{"reloaded", "running"}``.
    """
    from meshctl.cli.admin.config import problem

    if new_text is None:
        return {"changed": False, "reloaded": False}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(new_text, encoding="utf-8")
    refused = problem(tmp, state.profile)
    if refused is not None:
        tmp.unlink(missing_ok=True)
        raise _output.Failure(
            refused.replace(str(tmp), str(path)),
            "CONFIG_INVALID",
            hint=f"nothing was changed; fix the option, or edit {path} by hand",
        )
    old = path.read_bytes() if path.exists() else None
    if old is not None:
        os.chmod(tmp, path.stat().st_mode & 0o777)
    tmp.replace(path)
    return {"changed": True, **_reload(state, path, old)}


def _reload(state: State, path: Path, old: bytes | None) -> dict[str, Any]:
    try:
        result = state.call("mesh.reload", autostart=False)
    except MeshUnavailable:
        return {"reloaded": False, "running": False}
    if not result.get("reloaded"):
        if old is not None:
            path.write_bytes(old)  # the daemon kept its old config: so does the file
        raise _output.Failure(
            f"the daemon refused the new config: {result.get('error')}",
            "CONFIG_INVALID",
            hint=f"{path} was put back as it was",
        )
    return {"reloaded": True, "running": True}


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise _output.Failure(f"cannot read {path}: {exc.strerror}", "CONFIG_INVALID") from exc


def _file_option(value: str | None) -> str | None:
    return None if value is None else os.path.realpath(os.path.expanduser(value))


@fleet.command()
@common_options
@click.argument("url")
@click.option("--creds", metavar="FILE", help="NATS credentials file (JWT + nkey seed).")
@click.option("--nkey", metavar="FILE", help="NATS nkey seed file (instead of --creds).")
@click.option("--tls-ca", metavar="FILE", help="CA certificate that signed the server's.")
@click.option("--name", help="This host's name in the fleet (default: the hostname).")
def join(
    url: str, creds: str | None, nkey: str | None, tls_ca: str | None, name: str | None
) -> None:
    """Join the fleet at URL (nats://HOST:4222 or tls://…): write [fleet], reload.

    \b
    Examples:
      meshctl fleet join nats://vps.example:4222 --creds ~/.config/meshd/laptop.creds
      meshctl fleet join tls://vps.example:4222 --tls-ca ~/ca.pem --name laptop
    """
    from meshctl.cli.admin import fleet_config as _fleet_config
    from meshctl.cli.admin import fleet_extra
    from meshctl.cli.admin.config import config_file

    state = get_state()
    if creds and nkey:
        raise click.UsageError("give --creds or --nkey, not both")
    if module := fleet_extra.missing():
        raise _output.Failure(
            fleet_extra.refusal(module), "FLEET_EXTRA_MISSING",
            hint=f"install it with: {fleet_extra.install_hint()}; then join again",
        )  # fmt: skip
    path = config_file()
    changes: dict[str, Any] = {"url": url}
    if creds or nkey:  # one replaces the other
        changes.update(creds=_file_option(creds), nkey=_file_option(nkey))
    if tls_ca:
        changes["tls_ca"] = _file_option(tls_ca)
    if name:
        changes["name"] = name
    try:
        text = _fleet_config.with_fleet(_read(path), changes)
    except _fleet_config.FleetConfigError as exc:
        raise _output.Failure(f"{path}: {exc}", "CONFIG_INVALID") from exc
    done = _edit(state, text, path)
    st: dict[str, Any] | None = None
    if done["running"]:
        st = _wait_connected(state)
    doc = {"config": str(path), **done, "fleet": st}
    _output.emit(state.json, doc, lambda: _joined(doc))


def _wait_connected(state: State) -> dict[str, Any]:
    """``fleet.status`` once the link is up, or after ``JOIN_WAIT`` seconds."""
    deadline = time.monotonic() + JOIN_WAIT
    while True:
        st: dict[str, Any] = state.call("fleet.status", autostart=False)
        if st.get("connected") or time.monotonic() > deadline:
            return st
        time.sleep(0.1)


def _joined(doc: dict[str, Any]) -> str:
    head = f"Wrote [fleet] to {doc['config']}."
    st = doc.get("fleet")
    if not doc["running"] or st is None:
        return f"{head} No daemon runs now: it joins when it starts."
    return f"{head} The daemon reloaded it.\n{render_status(st)}"


@fleet.command()
@common_options
def leave() -> None:
    """Leave the fleet: remove [fleet] from config.toml and reload (this host alone again).

    \b
    Examples:
      meshctl fleet leave
    """
    from meshctl.cli.admin import fleet_config as _fleet_config
    from meshctl.cli.admin.config import config_file

    state = get_state()
    path = config_file()
    text = _read(path)
    try:
        new = _fleet_config.without_fleet(text)
    except _fleet_config.FleetConfigError as exc:
        raise _output.Failure(f"{path}: {exc}", "CONFIG_INVALID") from exc
    done = _edit(state, None if new == text else new, path)
    doc = {"config": str(path), **done}

    def human() -> str:
        if not done["changed"]:
            return f"This host was not in a fleet (no [fleet] table in {path})."
        tail = "The daemon reloaded it." if done.get("running") else "No daemon runs now."
        return f"Removed [fleet] from {path}. {tail} This host's mesh is on its own."

    _output.emit(state.json, doc, human)
