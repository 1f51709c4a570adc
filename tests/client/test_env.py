"""The environment is read in one place: ``meshctl/_core/env.py``.

Every other module of ``meshctl`` (the Hermes plugin aside: it runs inside Hermes,
with its own) asks :func:`meshctl._core.env.get` or ``isset``, and every variable so
read is listed in ``env.NAMES`` (the library's) or ``env.COMMANDS`` (the commands')
with what it is for. A child's environment is built with ``env.child``, never by
writing to ``os.environ``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from meshctl._core import env

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "meshctl"
HOME = PACKAGE / "_core" / "env.py"


def modules() -> list[Path]:
    """Every module of meshctl but env.py itself and the Hermes plugin."""
    return [
        p
        for p in sorted(PACKAGE.rglob("*.py"))
        if p != HOME and "hermes" not in p.relative_to(PACKAGE).parts
    ]


def environment_reads(path: Path, root: Path = PACKAGE) -> list[str]:
    """``file:line`` (relative to ``root``) for each place ``path`` names ``os.environ``,
    ``os.getenv`` or ``os.putenv``, or imports ``environ``/``getenv`` from os."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        named = (
            isinstance(node, ast.Attribute)
            and node.attr in ("environ", "getenv", "putenv", "environb")
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ) or (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(a.name in ("environ", "getenv", "environb") for a in node.names)
        )
        if named:
            found.append(f"{path.relative_to(root)}:{node.lineno}")
    return sorted(found, key=lambda s: int(s.rsplit(":", 1)[1]))


def names_asked(path: Path) -> set[str]:
    """The variable names ``path`` passes to ``_env.get``/``_env.isset`` as literals."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "isset")
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "_env"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.add(str(node.args[0].value))
    return found


def test_only_env_reads_the_environment() -> None:
    """No module of meshctl but env.py names os.environ (reading or writing it)."""
    assert [r for p in modules() for r in environment_reads(p)] == []


def test_the_check_sees_a_read(tmp_path: Path) -> None:
    """The check above can fail: each way of naming the environment is found."""
    path = tmp_path / "probe.py"
    path.write_text(
        "import os\nfrom os import environ\na = os.environ.get('X')\nb = os.getenv('Y')\n"
    )

    assert environment_reads(path, tmp_path) == ["probe.py:2", "probe.py:3", "probe.py:4"]


def test_every_variable_read_is_listed() -> None:
    """Each name asked of env.get/env.isset is in env.NAMES or env.COMMANDS."""
    asked = set().union(*(names_asked(p) for p in modules()))

    assert "MESHCTL_DEBUG" in asked  # the commands' reads were seen
    assert asked - set(env.NAMES) - set(env.COMMANDS) == set()
