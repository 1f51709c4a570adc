"""The plugin's modules import one way (no circle, lazy or for type hints alone), and
the environment the client reads is read through the client's one place for it."""

from __future__ import annotations

import ast
from pathlib import Path

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
