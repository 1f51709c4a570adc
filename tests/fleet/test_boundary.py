"""The fleet is a backend beneath the domains: it meets them at :mod:`meshd.ports` only.

``meshd.fleet`` imports the protocol, core records and the ports -- never a domain
(``meshd.handlers``, ``meshd.domains``) nor the service -- and no domain looks another
up: ``app.wire`` hands each its collaborators.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import meshd

SRC = Path(meshd.__file__).parent
DOMAIN_PACKAGES = ("meshd.handlers", "meshd.domains", "meshd.service", "meshd.app")


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at run time or for type hints alone."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_fleet_imports_no_domain_not_even_for_type_hints() -> None:
    crossing = {
        f"{path.name}: {mod}"
        for path in sorted((SRC / "fleet").rglob("*.py"))
        for mod in imported(path)
        if mod.startswith(DOMAIN_PACKAGES)
    }

    assert crossing == set()


def test_importing_every_fleet_module_loads_no_domain() -> None:
    probe = (
        "import importlib, pkgutil, json, sys, meshd.fleet as pkg\n"
        "for info in pkgutil.iter_modules(pkg.__path__):\n"
        "    importlib.import_module('meshd.fleet.' + info.name)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    loaded = set(json.loads(out.splitlines()[-1]))

    assert {m for m in loaded if m.startswith(DOMAIN_PACKAGES)} == set()


def test_no_domain_looks_another_up() -> None:
    """The service locator is gone: ``svc.domain(...)`` appears nowhere in the daemon."""
    sites = [
        f"{path.relative_to(SRC)}:{n}"
        for path in sorted(SRC.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if ".domain(" in line
    ]

    assert sites == []
