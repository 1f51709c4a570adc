"""``meshctl hermes install|uninstall|status``: the ``meshd`` plugin in Hermes profiles.

Hermes usually runs in an environment of its own that has no session-mesh, so
install copies the plugin (``meshctl/hermes/``) into ``$HERMES_HOME/plugins/meshd/``
with the blocking client it needs beside it (``_vendor/``: ``meshctl._sync`` and
every module it imports, their ``meshctl``/``meshd`` imports rewritten to relative
ones, :mod:`meshctl.cli.admin.hermes_vendor`), stamps it with the session-mesh
version, records the mesh profile and socket (``meshd-install.json``, with what it
added to the config) and enables the plugin with an in-place edit of
``plugins.enabled`` in the profile's ``config.yaml``
(:mod:`meshctl.cli.admin.hermes_config`: every other byte kept; never ``hermes
plugins enable``, whose config writer rewrites the whole file), then asks Hermes
(``hermes plugins list``, when on PATH) whether it sees the plugin enabled.

What it never does: overwrite a ``plugins/meshd/`` it did not write (the
``meshd_managed: true`` marker in ``plugin.yaml`` says which), or remove anything it
did not write on uninstall.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from meshctl._core import env as _env
from meshctl.cli.admin import hermes_config as _hermes_config
from meshctl.cli.admin import hermes_vendor
from meshctl.cli.admin.hermes_vendor import InstallError as InstallError  # noqa: PLC0414 (re-export)
from meshd.protocol.contract import rfc3339

PLUGIN_KEY = "meshd"
MARKER = "meshd_managed: true"
RECORD = "meshd-install.json"
# --- where Hermes lives ---------------------------------------------------------------


def hermes_root() -> Path:
    """Hermes's root folder: the one ``HERMES_HOME`` belongs to, else ``~/.hermes``."""
    env = _env.get("HERMES_HOME")
    default = Path.home() / ".hermes"
    if not env:
        return default
    home = Path(env).expanduser()
    if home.parent.name == "profiles":
        return home.parent.parent
    return default if default in home.parents else home


def homes(
    profile: str | None = None, all_profiles: bool = False, hermes_home: str | None = None
) -> list[tuple[str, Path]]:
    """(Hermes profile name, HERMES_HOME) for each profile the command applies to."""
    if hermes_home:
        return [("custom", Path(hermes_home).expanduser().absolute())]
    root = hermes_root()
    if all_profiles:
        found = [("default", root)]
        profiles = root / "profiles"
        if profiles.is_dir():
            found += sorted((p.name, p) for p in profiles.iterdir() if p.is_dir())
        return found
    if profile and profile != "default":
        return [(profile, root / "profiles" / profile)]
    env = _env.get("HERMES_HOME")
    if not env:
        return [("default", root)]
    home = Path(env).expanduser().absolute()
    if home == Path.home() / ".hermes":
        return [("default", home)]
    if home.parent.name == "profiles":
        return [(home.name, home)]
    return [("custom", home)]


def _no_home(name: str, home: Path) -> str:
    """Why ``home`` is not a Hermes home, and what to do instead."""
    if home.parent.name == "profiles":
        have = (
            sorted(p.name for p in home.parent.iterdir() if p.is_dir())
            if home.parent.is_dir()
            else []
        )
        known = f"; the profiles there: {', '.join(have)}" if have else ""
        return f"no Hermes profile {name} (no folder {home}){known}; nothing was written"
    return (
        f"no Hermes home at {home}: Hermes Agent is not installed for this user, or has "
        "not run yet (it makes its home on its first run); nothing was written. Install "
        "and run Hermes first, or name its home with --hermes-home PATH"
    )


# --- the plugin's files ---------------------------------------------------------------


def _version() -> str:
    from meshd import __version__

    return __version__


def _source_dir() -> Path:
    from meshctl import hermes

    return Path(hermes.__file__).parent


def write_plugin(dest: Path, record: dict[str, Any]) -> None:
    """Write the whole plugin folder at ``dest`` (which must not exist)."""
    version = str(record["version"])
    dest.mkdir(parents=True)
    src = _source_dir()
    for f in sorted(src.glob("*.py")):
        shutil.copyfile(f, dest / f.name)
    manifest = (src / "plugin.yaml").read_text(encoding="utf-8")
    manifest = re.sub(r"(?m)^version:.*$", f"version: {version}", manifest)
    (dest / "plugin.yaml").write_text(manifest.rstrip("\n") + f"\n{MARKER}\n", encoding="utf-8")
    hermes_vendor.write(dest / "_vendor", version)
    (dest / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def managed(dest: Path) -> bool:
    """Whether ``dest`` is a plugin folder this command wrote."""
    try:
        text = (dest / "plugin.yaml").read_text(encoding="utf-8")
    except OSError:
        return False
    return any(line.strip() == MARKER for line in text.splitlines())


def read_record(dest: Path) -> dict[str, Any]:
    try:
        data = json.loads((dest / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# --- enabling -------------------------------------------------------------------------


def hermes_sees(home: Path) -> str | None:
    """What Hermes itself says of the plugin in ``home`` (``hermes plugins list``, which
    reads the manifests and config.yaml): ``enabled``, ``not enabled``, …; None when
    ``hermes`` is not on PATH or did not answer."""
    exe = shutil.which("hermes")
    if exe is None:
        return None
    env = _env.child(HERMES_HOME=str(home))
    try:
        done = subprocess.run(
            [exe, "plugins", "list", "--json"], env=env, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        listed = json.loads(done.stdout) if done.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    for p in listed if isinstance(listed, list) else []:
        if isinstance(p, dict) and p.get("name") == PLUGIN_KEY:
            return str(p.get("status") or "")
    return "not listed"


def _read_config(path: Path) -> str | None:
    """config.yaml's text exactly as stored (no newline translation), None if absent."""
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None


def _write_config(home: Path, path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=home, prefix=".config.yaml.")
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    if path.exists():
        os.chmod(tmp, path.stat().st_mode & 0o777)
    os.replace(tmp, path)


def _enable_config(home: Path) -> str:
    """Put the plugin in ``plugins.enabled`` with the byte-preserving editor; what was
    added (:data:`meshctl.cli.admin.hermes_config.ADDED`, ``file``: the whole file)."""
    path = home / "config.yaml"
    text = _read_config(path)
    edited, added = _hermes_config.enable(text or "", PLUGIN_KEY)
    if added:
        _write_config(home, path, edited)
    return "file" if text is None and added else added


def _disable_config(home: Path, added: str) -> bool:
    """Take out exactly what :func:`_enable_config` added (and the entry an older
    install's ``hermes plugins enable`` wrote); True when the file changed."""
    path = home / "config.yaml"
    text = _read_config(path)
    if text is None:
        return False
    edited = _hermes_config.disable(text, PLUGIN_KEY, "block" if added == "file" else added)
    edited = _hermes_config.drop_entry(edited, PLUGIN_KEY) if "entries:" in edited else edited
    if added == "file" and not edited:
        path.unlink()
        return True
    if edited == text:
        return False
    _write_config(home, path, edited)
    return True


def is_enabled(home: Path) -> bool:
    try:
        text = (home / "config.yaml").read_text(encoding="utf-8")
    except OSError:
        return False
    return _hermes_config.is_enabled(text, PLUGIN_KEY)


# --- the three commands ---------------------------------------------------------------


def install(name: str, home: Path, mesh_profile: str, socket: str | None) -> dict[str, Any]:
    """Place (or update) the plugin in one Hermes home and enable it.

    A home that does not exist is refused, not created: Hermes makes its home when it
    first runs, so a missing one is a machine without Hermes or a mistyped profile,
    and a plugin folder made there would only let ``doctor`` call the plugin ok."""
    if not home.is_dir():
        raise InstallError(_no_home(name, home))
    plugins = home / "plugins"
    dest = plugins / PLUGIN_KEY
    if dest.exists() and not managed(dest):
        raise InstallError(
            f"{dest} holds a plugin that meshctl did not install; leaving it alone "
            "(move it away and run `meshctl hermes install` again)"
        )
    before = read_record(dest) if dest.exists() else {}
    previous = before.get("version")
    # What install added to config.yaml, kept across reinstalls (a reinstall adds
    # nothing: the first install's answer is what uninstall must take out).
    added = before.get("config_added", "") if is_enabled(home) else _enable_config(home)
    record = {
        "managed": True, "version": _version(), "profile": mesh_profile, "socket": socket,
        "hermes_profile": name, "installed_at": rfc3339(time.time()), "config_added": added,
    }  # fmt: skip
    plugins.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=plugins, prefix=".meshd-new-"))
    try:
        write_plugin(staging / PLUGIN_KEY, record)
        if dest.exists():
            old = staging / "old"
            dest.rename(old)
        (staging / PLUGIN_KEY).rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {
        "hermes_profile": name, "hermes_home": str(home), "path": str(dest),
        "version": record["version"], "previous_version": previous, "enabled": is_enabled(home),
        "enabled_by": "config.yaml", "hermes_sees": hermes_sees(home), "profile": mesh_profile,
        "socket": socket,
    }  # fmt: skip


def uninstall(name: str, home: Path) -> dict[str, Any]:
    """Remove the plugin this command wrote and take it out of ``plugins.enabled``."""
    dest = home / "plugins" / PLUGIN_KEY
    removed = False
    added = "item"  # no record (an older install): just take the name out
    if dest.exists():
        if not managed(dest):
            raise InstallError(f"{dest} was not installed by meshctl; leaving it alone")
        added = str(read_record(dest).get("config_added", "item"))
        shutil.rmtree(dest)
        removed = True
    # Not `hermes plugins disable`: it would add the key to plugins.disabled, a line we
    # never wrote, and rewrite the whole file. Taking out what install added (and the
    # plugins.entries an older install's `hermes plugins enable` wrote) undoes it.
    disabled = _disable_config(home, added)
    return {"hermes_profile": name, "hermes_home": str(home), "removed": removed,
            "disabled": disabled}  # fmt: skip


def status(name: str, home: Path, reachable: Any) -> dict[str, Any]:
    """What one profile has: installed, enabled (``missing_folder``: enabled in its
    config, no plugin folder), version matches, daemon reachable."""
    dest = home / "plugins" / PLUGIN_KEY
    record = read_record(dest) if dest.exists() else {}
    installed = dest.exists() and managed(dest)
    version = record.get("version")
    current = _version()
    profile = str(record.get("profile") or (name if name != "custom" else "default"))
    socket = record.get("socket") or None
    # Enabled with no folder: a profile cloned from one that has the plugin (Hermes
    # copies config.yaml, not plugins/), or one whose folder was deleted by hand.
    enabled = is_enabled(home)
    return {
        "hermes_profile": name, "hermes_home": str(home), "installed": installed,
        "foreign": dest.exists() and not installed, "enabled": enabled,
        "missing_folder": enabled and not dest.exists(),
        "version": version, "current_version": current,
        "outdated": installed and version != current, "profile": profile, "socket": socket,
        "daemon_reachable": bool(reachable(profile, socket)) if installed else None,
    }  # fmt: skip
