"""``meshctl hermes install|uninstall|status``: the ``meshd`` plugin in Hermes profiles.

Hermes usually runs in an environment of its own that has no session-mesh, so
install copies the plugin (``meshctl/hermes/``) into ``$HERMES_HOME/plugins/meshd/``
with the blocking client it needs beside it (``_vendor/``: ``meshctl._sync`` and
every module it imports, their ``meshctl``/``meshd`` imports rewritten to relative
ones), stamps it with the session-mesh version, records the mesh profile and socket
(``meshd-install.json``) and enables the plugin: ``hermes plugins enable meshd``
when ``hermes`` is on PATH, else an in-place edit of ``plugins.enabled`` in the
profile's ``config.yaml`` (:mod:`meshctl.cli.admin.hermes_config`).

What it never does: overwrite a ``plugins/meshd/`` it did not write (the
``meshd_managed: true`` marker in ``plugin.yaml`` says which), or remove anything it
did not write on uninstall.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from meshctl.cli.admin import hermes_config as _hermes_config
from meshd.protocol.contract import rfc3339

PLUGIN_KEY = "meshd"
MARKER = "meshd_managed: true"
RECORD = "meshd-install.json"
#: Where the vendored client's closure starts (``meshctl.cli._git``: repo and branch).
_ROOTS = ("meshctl._sync", "meshctl.cli._git")
#: Modules that may travel with the plugin (each is also checked to import only the
#: standard library and other modules of the closure).
_VENDORABLE = re.compile(r"meshctl\._\w+|meshctl\.cli\._git|meshd\.protocol\.\w+")
#: Third-party modules the client imports only when present, falling back to the
#: standard library when not (``meshctl._conn``'s compiled decoder for long replies):
#: the vendored client runs without them in Hermes's environment.
OPTIONAL = frozenset({"msgspec.json"})


class InstallError(Exception):
    """Install or uninstall refused; the message says why and what to do."""


# --- where Hermes lives ---------------------------------------------------------------


def hermes_root() -> Path:
    """Hermes's root folder: the one ``HERMES_HOME`` belongs to, else ``~/.hermes``."""
    env = os.environ.get("HERMES_HOME")
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
    env = os.environ.get("HERMES_HOME")
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


def _module_file(name: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise InstallError(f"cannot find module {name} to copy into the plugin")
    return Path(spec.origin)


def _vendored_name(module: str) -> str:
    """``meshctl._sync`` -> ``_sync``; ``meshd.protocol.errors`` -> ``_proto_errors``."""
    if module.startswith("meshd.protocol."):
        return "_proto_" + module.rsplit(".", 1)[1]
    return module.rsplit(".", 1)[1]


def _imports(path: Path) -> list[str]:
    """Modules a file imports at any depth (lazily or not), ``from pkg import mod`` as
    ``pkg.mod`` for our packages."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mod = node.module
            if mod in ("meshctl", "meshd.protocol"):
                found += [f"{mod}.{a.name}" for a in node.names]
            else:
                found.append(mod)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names]
    return found


def _ours(module: str) -> bool:
    return module.split(".", maxsplit=1)[0] in ("meshctl", "meshd")


def client_closure() -> list[str]:
    """Every module the vendored client needs; refuses any that is not standard library only."""
    import sys

    todo, seen = list(_ROOTS), []
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        if not _VENDORABLE.fullmatch(mod):
            raise InstallError(f"the Hermes plugin cannot carry {mod} (not standard library only)")
        seen.append(mod)
        for dep in _imports(_module_file(mod)):
            if _ours(dep):
                todo.append(dep)
            elif (
                dep.split(".")[0] not in sys.stdlib_module_names
                and dep != "__future__"
                and dep not in OPTIONAL
            ):
                raise InstallError(f"the Hermes plugin cannot carry {mod}: it imports {dep}")
    return sorted(seen)


def _from_protocol(m: re.Match[str]) -> str:
    names = [n.strip().split(" as ") for n in m.group(2).split(",") if n.strip()]
    parts = [f"_proto_{n[0].strip()} as {(n[-1]).strip()}" for n in names]
    return f"{m.group(1)}from . import {', '.join(parts)}"


_REWRITES = (
    (re.compile(r"^(\s*)from meshctl import ", re.M), r"\1from . import "),
    (re.compile(r"^(\s*)from meshctl\.(?:cli\.)?(_\w+) import ", re.M), r"\1from .\2 import "),
    (re.compile(r"^(\s*)from meshd\.protocol\.(\w+) import ", re.M), r"\1from ._proto_\2 import "),
)


def vendored_source(module: str) -> str:
    """The module's source with its ``meshctl``/``meshd`` imports made relative."""
    text = _module_file(module).read_text(encoding="utf-8")
    for pattern, repl in _REWRITES:
        text = pattern.sub(repl, text)
    text = re.sub(r"(?m)^(\s*)from meshd\.protocol import ([\w ,]+)$", _from_protocol, text)
    left = [m for m in _imports_of_text(text) if _ours(m)]
    if left:
        raise InstallError(f"{module}: imports left after vendoring: {left}")
    return text


def _imports_of_text(text: str) -> list[str]:
    out: list[str] = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
    return out


_VENDOR_INIT = '''"""The Session Mesh blocking client, copied by `meshctl hermes install`."""

from ._proto_errors import *  # noqa: F403
from ._proto_errors import (
    MeshError, MeshTimeout, MeshUnavailable, NotFound, SessionExpired, UnknownSession,
)
from ._sync import Mesh

VERSION = {version!r}
__all__ = ["VERSION", "Mesh", "MeshError", "MeshTimeout", "MeshUnavailable", "NotFound",
           "SessionExpired", "UnknownSession"]
'''


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
    vendor = dest / "_vendor"
    vendor.mkdir()
    for module in client_closure():
        (vendor / f"{_vendored_name(module)}.py").write_text(
            vendored_source(module), encoding="utf-8"
        )
    (vendor / "__init__.py").write_text(_VENDOR_INIT.format(version=version), encoding="utf-8")
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


def _hermes(home: Path, *args: str) -> bool:
    """Run ``hermes ARGS`` for ``home``; False when there is no ``hermes`` or it failed."""
    exe = shutil.which("hermes")
    if exe is None:
        return False
    env = {**os.environ, "HERMES_HOME": str(home)}
    try:
        done = subprocess.run(
            [exe, *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _edit_config(home: Path, enabled: bool) -> bool:
    """Set the plugin in ``config.yaml``'s ``plugins.enabled``; True when the file changed."""
    path = home / "config.yaml"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if not enabled:
            return False
        text = ""
    edited = _hermes_config.set_enabled(text, PLUGIN_KEY, enabled)
    if not enabled:  # and the entry `hermes plugins enable` wrote at install
        edited = _hermes_config.drop_entry(edited, PLUGIN_KEY)
    if edited == text:
        return False
    fd, tmp = tempfile.mkstemp(dir=home, prefix=".config.yaml.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(edited)
    if path.exists():
        os.chmod(tmp, path.stat().st_mode & 0o777)
    os.replace(tmp, path)
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
    previous = read_record(dest).get("version") if dest.exists() else None
    record = {
        "managed": True, "version": _version(), "profile": mesh_profile, "socket": socket,
        "hermes_profile": name, "installed_at": rfc3339(time.time()),
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
    how = "hermes"
    if not _hermes(home, "plugins", "enable", PLUGIN_KEY, "--no-allow-tool-override"):
        how = "config.yaml"
        _edit_config(home, True)
    return {
        "hermes_profile": name, "hermes_home": str(home), "path": str(dest),
        "version": record["version"], "previous_version": previous, "enabled": is_enabled(home),
        "enabled_by": how, "profile": mesh_profile, "socket": socket,
    }  # fmt: skip


def uninstall(name: str, home: Path) -> dict[str, Any]:
    """Remove the plugin this command wrote and take it out of ``plugins.enabled``."""
    dest = home / "plugins" / PLUGIN_KEY
    removed = False
    if dest.exists():
        if not managed(dest):
            raise InstallError(f"{dest} was not installed by meshctl; leaving it alone")
        shutil.rmtree(dest)
        removed = True
    # Not `hermes plugins disable`: it would add the key to plugins.disabled, a line we
    # never wrote. Taking it out of plugins.enabled (and plugins.entries, where
    # `hermes plugins enable` put allow_tool_override) undoes what install did.
    disabled = _edit_config(home, False)
    return {"hermes_profile": name, "hermes_home": str(home), "removed": removed,
            "disabled": disabled}  # fmt: skip


def status(name: str, home: Path, reachable: Any) -> dict[str, Any]:
    """What one profile has: installed, enabled, version matches, daemon reachable."""
    dest = home / "plugins" / PLUGIN_KEY
    record = read_record(dest) if dest.exists() else {}
    installed = dest.exists() and managed(dest)
    version = record.get("version")
    current = _version()
    profile = str(record.get("profile") or (name if name != "custom" else "default"))
    socket = record.get("socket") or None
    return {
        "hermes_profile": name, "hermes_home": str(home), "installed": installed,
        "foreign": dest.exists() and not installed, "enabled": is_enabled(home),
        "version": version, "current_version": current,
        "outdated": installed and version != current, "profile": profile, "socket": socket,
        "daemon_reachable": bool(reachable(profile, socket)) if installed else None,
    }  # fmt: skip
