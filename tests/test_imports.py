"""Import boundaries (docs/ARCHITECTURE.md, "Import boundaries"): the core does no I/O,
the contract stands alone, the client needs only the contract, the CLI never loads the
store or the server, and the fleet sits beneath the domains.

Two kinds of check. The run-time ones import in a fresh interpreter and look at
``sys.modules``, so an import that sneaks in through another module is caught too.
The static ones read every import statement of a folder, lazy ones inside functions
included, which a run-time check would not execute."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

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
for info in pkgutil.walk_packages(pkg.__path__, "{package}."):
    if not info.name.endswith("__main__"):
        importlib.import_module(info.name)
"""
"""Imports every module of a package, its subpackages' too."""


def imported(folder: str) -> dict[str, set[str]]:
    """Each module file under ``src/<folder>`` -> the absolute modules it imports anywhere
    (at the top, in a function, under ``TYPE_CHECKING``)."""
    found: dict[str, set[str]] = {}
    for path in sorted((SRC / folder).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.update(f"{node.module}.{a.name}" for a in node.names)
        found[str(path.relative_to(SRC))] = names
    return found


def within(name: str, *packages: str) -> bool:
    """``name`` is one of ``packages`` or inside one."""
    return any(name == p or name.startswith(p + ".") for p in packages)


def offenders(
    folder: str, allowed: tuple[str, ...], watched: tuple[str, ...] = ("meshd",)
) -> list[str]:
    """``file: module`` for each import under ``src/<folder>`` of a module inside
    ``watched`` but outside ``allowed``."""
    return [
        f"{path}: {name}"
        for path, names in imported(folder).items()
        for name in sorted(names)
        if within(name, *watched) and not within(name, *allowed)
    ]


def test_core_imports_no_io() -> None:
    """Every module of meshd.core: no event loop, no SQLite, no sockets, no threads, and
    no daemon module outside the core and the protocol."""
    loaded = loaded_after(IMPORT_ALL.format(package="meshd.core"))

    assert "meshd.core.claims.table" in loaded  # the subpackages were imported
    assert loaded & IO_MODULES == set()
    daemon = {m for m in loaded if m.startswith("meshd.")}
    assert {m for m in daemon if not m.startswith(("meshd.core", "meshd.protocol"))} == set()


def test_client_loads_only_the_contract() -> None:
    """import meshctl and every blocking client module: no daemon module but the contract."""
    loaded = loaded_after(
        "import meshctl; meshctl.Mesh; meshctl.Session; meshctl.MeshError\n"
        "import meshctl._sync, meshctl._conn, meshctl._core.messaging, meshctl._claims, "
        "meshctl._blocking, meshctl._sync.session, meshctl._sync.session, meshctl._sync.responder, "
        "meshctl._paths, meshctl._spawn, meshctl._events"
    )

    daemon = {m for m in loaded if m.split(".")[0] == "meshd"}
    assert {m for m in daemon if m not in CONTRACT and not m.startswith("meshd.protocol.")} == set()
    assert loaded & {"msgspec", "anyio", "platformdirs"} == set()  # so: stdlib-only modules


DAEMON_SIDE = ("meshd.store", "meshd.server", "meshd.service", "meshd.domains", "meshd.app")
"""Modules only the daemon loads: its store, server, service, domains and composition root."""


def test_cli_never_loads_the_store() -> None:
    """Every CLI command module (``cli/admin/`` included): the store, the server and the
    rest of the daemon's side stay unloaded."""
    loaded = loaded_after(IMPORT_ALL.format(package="meshctl.cli"))

    assert "meshctl.cli.admin.doctor" in loaded  # the subpackage was imported
    assert {m for m in loaded if within(m, *DAEMON_SIDE)} == set()


def test_import_meshctl_loads_neither_server_nor_store() -> None:
    """``import meshctl`` and its face: no daemon server, no store."""
    loaded = loaded_after("import meshctl\nfor n in meshctl.__all__: getattr(meshctl, n)")

    assert {m for m in loaded if within(m, "meshd.server", "meshd.store")} == set()


def test_the_core_names_neither_anyio_nor_sqlite3() -> None:
    """No import of the event loop or SQLite anywhere in ``meshd/core/``, lazy ones too."""
    bad = offenders("meshd/core", allowed=(), watched=("anyio", "sqlite3", "asyncio"))

    assert bad == []


def test_the_protocol_imports_nothing_of_meshd_outside_itself() -> None:
    """``meshd.protocol`` is the contract's leaf: both sides import it, it imports neither."""
    bad = offenders("meshd/protocol", allowed=("meshd.protocol", "meshd.__version__"))

    assert bad == []


def test_the_library_and_the_commands_import_only_the_contract() -> None:
    """``meshctl`` (the library, the Hermes plugin, the commands) imports nothing of
    ``meshd`` but the contract; ``cli/admin/`` also reads the daemon's config file with
    the daemon's own finder and loader (``meshd.paths``, ``meshd.config``)."""
    contract = ("meshd.protocol", "meshd.__version__")
    admin = "meshctl/cli/admin/"

    bad = offenders("meshctl", allowed=contract)

    assert [b for b in bad if not b.startswith(admin)] == []
    assert [b for b in bad if not within(b.split(": ")[1], "meshd.paths", "meshd.config")] == []


def test_the_fleet_imports_no_domain() -> None:
    """``meshd.fleet`` sits beneath the domains: it never imports ``meshd.domains``."""
    bad = offenders("meshd/fleet", allowed=(), watched=("meshd.domains",))

    assert bad == []


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


def module_edges(folder: str) -> dict[str, set[str]]:
    """Each module under ``src/<folder>`` -> the modules of that same tree it names in an
    import statement (at the top, in a function, under ``TYPE_CHECKING``): ``from a
    import b`` names ``a.b`` when that is a module, else ``a``."""
    root = folder.replace("/", ".")
    files = {
        ".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__"): p
        for p in (SRC / folder).rglob("*.py")
    }
    edges: dict[str, set[str]] = {}
    for name, path in files.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    targets.add(sub if sub in files else node.module)
        edges[name] = {t for t in targets if t in files and t != name and within(t, root)}
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            group.append(v)
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_circles_finds_a_loop() -> None:
    """The check below can fail: a loop of three modules (and a type-only pair) is found."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}

    assert circles(edges) == [["a", "b", "c"], ["d", "e"]]


def test_the_daemon_imports_one_way() -> None:
    """No import circle in ``meshd``, type-only and lazy imports included: the service
    drives domains through its ``Hooks`` protocol, the claims reads are handed their
    keys and view, and the fleet mail names what it needs of the messages and signals
    domains as protocols of its own (there were four circles, three of them type-only)."""
    edges = module_edges("meshd")

    assert "meshd.service" in edges["meshd.domain"]  # the graph was read
    assert circles(edges) == []


def test_the_client_imports_one_way() -> None:
    """No import circle in the library (``meshctl`` but its commands and the Hermes
    plugin), type-only and lazy imports included: the session layer names its client and session through
    ``_async/abc.py`` (and its generated twin) and connections name the client through
    ``_core/abc.py``, so imports run from the client down; ``_blocking`` never imports
    back from ``_sync``."""
    edges = {
        m: ts
        for m, ts in module_edges("meshctl").items()
        if not within(m, "meshctl.hermes", "meshctl.cli")
    }

    assert "meshctl._async.session" in edges["meshctl._async.client"]  # the graph was read
    assert circles(edges) == []
    assert {t for t in edges["meshctl._blocking"] if within(t, "meshctl._sync")} == set()


def test_the_commands_and_the_plugins_import_one_way() -> None:
    """No import circle in ``meshctl`` as a whole, its commands and the agent plugins
    included: what ``doctor`` and ``daemon reload`` both say of the config file lives
    in ``cli/admin/config.py``, below both, not in ``doctor`` (``daemon`` imported it
    there, and ``service`` imports ``daemon``)."""
    edges = module_edges("meshctl")

    assert "meshctl.cli.admin.config" in edges["meshctl.cli.daemon"]  # the graph was read
    assert circles(edges) == []
