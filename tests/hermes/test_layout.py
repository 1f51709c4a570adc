"""The plugin's modules import one way (no circle, lazy or for type hints alone), and
the environment the client reads is read through the client's one place for it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import meshctl.hermes

PLUGIN = Path(meshctl.hermes.__file__).parent


def _imports(path: Path) -> set[str]:
    """The plugin modules ``path`` imports, at any depth (lazily, for type hints)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found |= {a.name for a in node.names}
    return {m for m in found if (PLUGIN / f"{m}.py").exists()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle in ``graph`` (its modules in order), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for dep in sorted(graph.get(m, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state and (found := visit(dep)):
                return found
        state[m] = 2
        stack.pop()
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_plugin_modules_import_one_way() -> None:
    graph = {p.stem: _imports(p) for p in PLUGIN.glob("*.py")}

    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_link_reads_the_environment_through_the_clients_one_place() -> None:
    tree = ast.parse((PLUGIN / "_client.py").read_text(encoding="utf-8"))
    reads = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv")
    ]

    assert reads == [], f"_client.py reads os.environ itself at lines {reads}"


def _mesh_variable_reads(path: Path) -> list[str]:
    """``os.environ.get``/``os.getenv`` calls of ``path`` naming a ``MESH_*`` variable,
    by its text or by a module constant that holds it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {
        t.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for t in node.targets
        if isinstance(t, ast.Name)
    }

    def mesh(arg: ast.expr) -> bool:
        value = arg.value if isinstance(arg, ast.Constant) else None
        if isinstance(arg, ast.Name):
            value = names.get(arg.id)
        return isinstance(value, str) and value.startswith("MESH_")

    return [
        f"{path.name}:{node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and ast.unparse(node.func) in ("os.environ.get", "os.getenv", "environ.get")
        and any(mesh(a) for a in node.args)
    ]


def test_no_plugin_module_reads_a_mesh_variable_itself() -> None:
    """``MESH_*`` variables (the socket, the profile, the hooks' timeout, the tool set)
    are read through the client's one place for the environment; the plugin reads only
    Hermes's own variables (``HERMES_HOME``, ``TERMINAL_CWD`` …) itself."""
    found = [hit for path in sorted(PLUGIN.glob("*.py")) for hit in _mesh_variable_reads(path)]

    assert found == [], f"read of a MESH_ variable outside meshctl._core.env: {found}"


def test_the_tool_set_follows_mesh_hermes_tools_over_the_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``MESH_HERMES_TOOLS`` (read through the client's one place) wins over Hermes's
    config; unset, the config says; neither, the compact set."""
    from meshctl.hermes import _tools

    full = {"plugins": {"entries": {"meshd": {"tools": "full"}}}}
    monkeypatch.delenv("MESH_HERMES_TOOLS", raising=False)
    assert (_tools.tool_mode({}), _tools.tool_mode(full)) == ("compact", "full")
    monkeypatch.setenv("MESH_HERMES_TOOLS", " Compact ")
    assert _tools.tool_mode(full) == "compact"
    monkeypatch.setenv("MESH_HERMES_TOOLS", "full")
    assert _tools.tool_mode({}) == "full"
