"""The blocking client the Hermes plugin carries (``_vendor/`` beside it): which modules,
and their ``meshctl``/``meshd`` imports rewritten to relative ones in one flat folder.

Hermes usually runs in an environment of its own that has no session-mesh: the
plugin takes ``meshctl._sync`` and every module it imports (:func:`client_closure`,
each checked to import only the standard library and other modules of the closure)
and the tool definitions (``meshctl.agent``, :func:`agent_files`), written by
:func:`write` for ``meshctl hermes install`` (:mod:`meshctl.cli.admin.hermes_install`).
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

#: Where the vendored client's closure starts (``meshctl.cli._git``: repo and branch).
_ROOTS = ("meshctl._sync", "meshctl.cli._git")
#: Modules that may travel with the plugin (each is also checked to import only the
#: standard library and other modules of the closure).
_VENDORABLE = re.compile(r"meshctl\._\w+(?:\.\w+)?|meshctl\.cli\._git|meshd\.protocol\.\w+")
#: Third-party modules the client imports only when present, falling back to the
#: standard library when not (``meshctl._conn``'s compiled decoder for long replies):
#: the vendored client runs without them in Hermes's environment.
OPTIONAL = frozenset({"msgspec.json"})


class InstallError(Exception):
    """Install or uninstall refused; the message says why and what to do. Defined here,
    below :mod:`~meshctl.cli.admin.hermes_install` (which names it too), as a module
    the client cannot carry refuses the install."""


def agent_files() -> list[Path]:
    """The tool definitions (``meshctl.agent``), carried whole; refuses any module of it
    that imports more than the standard library and its own package (relative)."""
    import sys

    from meshctl import agent

    files = sorted(Path(agent.__file__).parent.glob("*.py"))
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                continue
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "__future__":
                    raise InstallError(
                        f"the Hermes plugin cannot carry agent/{f.name}: it imports {name}"
                    )
    return files


def _module_file(name: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise InstallError(f"cannot find module {name} to copy into the plugin")
    return Path(spec.origin)


def _vendored_name(module: str) -> str:
    """``meshctl._sync`` -> ``_sync``; ``meshctl._core.session`` -> ``_core_session``;
    ``meshd.protocol.errors`` -> ``_proto_errors``: the vendored client is one flat folder."""
    if module.startswith("meshd.protocol."):
        return "_proto_" + module.rsplit(".", 1)[1]
    parts = module.split(".")[1:]
    if parts[0] == "cli":
        return parts[-1]
    return parts[0] + "".join("_" + p.lstrip("_") for p in parts[1:])


def _package(module: str) -> bool:
    """Whether ``module`` (one of ours) is a package (``meshctl._sync``, ``meshctl._core``)."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    return spec is not None and spec.submodule_search_locations is not None


def _submodule(package: str, name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(f"{package}.{name}") is not None


def _imports(path: Path) -> list[str]:
    """Modules a file imports at any depth (lazily or not), ``from pkg import mod`` as
    ``pkg.mod`` for our packages."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mod = node.module
            if mod in ("meshctl", "meshd.protocol"):
                found += [f"{mod}.{a.name}" for a in node.names]
            elif mod.startswith("meshctl.") and _package(mod):
                found.append(mod)
                found += [f"{mod}.{a.name}" for a in node.names if _submodule(mod, a.name)]
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


def _from_package(m: re.Match[str]) -> str:
    """``from meshctl._core import session as _session`` -> ``from . import _core_session
    as _session``; a package's own names (``from meshctl._sync import Mesh``) stay."""
    package, names = m.group(2), m.group(3)
    if not _package(package):
        return f"{m.group(1)}from .{_vendored_name(package)} import {names}"
    parts = []
    for n in (n.strip().split(" as ") for n in names.split(",") if n.strip()):
        name, alias = n[0].strip(), n[-1].strip()
        if not _submodule(package, name):
            return f"{m.group(1)}from .{_vendored_name(package)} import {names}"
        parts.append(f"{_vendored_name(f'{package}.{name}')} as {alias}")
    return f"{m.group(1)}from . import {', '.join(parts)}"


def _from_module(m: re.Match[str]) -> str:
    return f"{m.group(1)}from .{_vendored_name(m.group(2))} import "


_REWRITES = (
    (re.compile(r"^(\s*)from meshctl import ", re.M), r"\1from . import "),
    (re.compile(r"^(\s*)from (meshctl\._\w+) import ([\w ,]+)$", re.M), _from_package),
    (re.compile(r"^(\s*)from (meshctl\.(?:cli\.)?_\w+(?:\.\w+)?) import ", re.M), _from_module),
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


def write(vendor: Path, version: str) -> None:
    """Write the vendored client and the tool definitions into ``vendor`` (made here),
    stamped with ``version``."""
    vendor.mkdir()
    for module in client_closure():
        (vendor / f"{_vendored_name(module)}.py").write_text(
            vendored_source(module), encoding="utf-8"
        )
    (vendor / "__init__.py").write_text(_VENDOR_INIT.format(version=version), encoding="utf-8")
    agent = vendor / "agent"
    agent.mkdir()
    for f in agent_files():
        shutil.copyfile(f, agent / f.name)
