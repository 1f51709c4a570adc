"""Import boundaries: the core does no I/O, the client needs only the contract, the
CLI never loads the store. Each check imports in a fresh interpreter and looks at
``sys.modules``, so an import that sneaks in through another module is caught too."""

from __future__ import annotations

import json
import subprocess
import sys

CONTRACT = ("meshd", "meshd.protocol")
"""The daemon modules a client may load: the package roots and the contract modules under
``meshd.protocol`` that need nothing but the standard library (checked below)."""

IO_MODULES = {"anyio", "asyncio", "sqlite3", "socket", "subprocess", "selectors", "threading"}


def loaded_after(code: str) -> set[str]:
    """The modules loaded after ``code`` runs in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


IMPORT_ALL = """
import importlib, pkgutil, {package} as pkg
for info in pkgutil.iter_modules(pkg.__path__):
    if info.name != "__main__":
        importlib.import_module("{package}." + info.name)
"""


def test_core_imports_no_io() -> None:
    """Every module of meshd.core: no event loop, no SQLite, no sockets, no threads, and
    no daemon module outside the core and the protocol."""
    loaded = loaded_after(IMPORT_ALL.format(package="meshd.core"))

    assert loaded & IO_MODULES == set()
    daemon = {m for m in loaded if m.startswith("meshd.")}
    assert {m for m in daemon if not m.startswith(("meshd.core", "meshd.protocol"))} == set()


def test_client_loads_only_the_contract() -> None:
    """import meshctl and every blocking client module: no daemon module but the contract."""
    loaded = loaded_after(
        "import meshctl; meshctl.Mesh; meshctl.Session; meshctl.MeshError\n"
        "import meshctl._sync, meshctl._conn, meshctl._messaging, meshctl._claims, "
        "meshctl._blocking, meshctl._sync_session, meshctl._sync_claim, meshctl._responder, "
        "meshctl._paths, meshctl._spawn, meshctl._events"
    )

    daemon = {m for m in loaded if m.split(".")[0] == "meshd"}
    assert {m for m in daemon if m not in CONTRACT and not m.startswith("meshd.protocol.")} == set()
    assert loaded & {"msgspec", "anyio", "platformdirs"} == set()  # so: stdlib-only modules


def test_cli_never_loads_the_store() -> None:
    """Every CLI command module: the store (and the daemon's server) stay unloaded."""
    loaded = loaded_after(IMPORT_ALL.format(package="meshctl.cli"))

    daemon_side = (
        "meshd.store",
        "meshd.server",
        "meshd.service",
        "meshd.domains",
        "meshd.app",
    )
    assert {m for m in loaded if m.startswith(daemon_side)} == set()


def test_nats_stays_out_without_fleet() -> None:
    """The whole daemon and the CLI import without nats-py: only meshd.fleet needs it
    (SPEC §12, ``session-mesh[fleet]``), and only once a ``[fleet]`` table exists."""
    block = "import sys; sys.modules['nats'] = None  # as if nats-py were not installed\n"
    loaded = loaded_after(
        block
        + "import meshd.app, meshd.fleet, meshd.domains.fleet\n"
        + IMPORT_ALL.format(package="meshctl.cli")
    )

    # (``import nats`` would have raised ImportError above)
    assert {m for m in loaded if m.startswith("meshd.fleet.")} == set()


def test_only_meshd_fleet_imports_nats() -> None:
    """No module outside ``src/meshd/fleet/`` names nats-py (it is an optional extra)."""
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src"
    pattern = re.compile(r"^\s*(import nats|from nats[ .])", re.M)
    offenders = [
        str(p.relative_to(src))
        for p in src.rglob("*.py")
        if pattern.search(p.read_text()) and "meshd/fleet" not in p.as_posix()
    ]
    assert offenders == []
