"""The blocking session layer is generated from the async one, and stays so.

``scripts/unasync.py`` writes ``meshctl/_sync/session.py`` and ``shared.py`` from
``meshctl/_async/``; ``scripts/test.sh`` runs ``--check``, which must fail while a
generated file is stale.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync", ROOT / "scripts" / "unasync.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_files_are_current() -> None:
    """Each generated file is exactly what the script makes of its source today."""
    unasync = _script()

    for source, target in unasync.FILES.items():
        have = (unasync.PACKAGE / target).read_text(encoding="utf-8")
        assert have == unasync.generated(source, target), f"{target} is stale"


def test_the_substitutions() -> None:
    """async/await go, each Async name and _async module becomes its blocking twin."""
    unasync = _script()
    text = (
        "from meshctl._async.shared import AsyncOnce\n"
        "async def f(self) -> AsyncClaim:\n"
        "    async with self._state:\n"
        "        return await self.mesh.call('x')\n"
        "    async def __aenter__(self): await conn.aclose()\n"
    )

    expected = (
        "from meshctl._sync.shared import Once\n"
        "def f(self) -> Claim:\n"
        "    with self._state:\n"
        "        return self.mesh.call('x')\n"
        "    def __enter__(self): conn.close()\n"
    )
    assert unasync.unasync(text) == expected


def test_check_fails_when_a_generated_file_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """``--check`` exits 1 and names the file when the source changed after generating;
    writing brings it back."""
    unasync = _script()
    package = tmp_path / "meshctl"
    shutil.copytree(unasync.PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(unasync, "PACKAGE", package)
    source = package / "_async" / "shared.py"
    source.write_text(
        source.read_text(encoding="utf-8").replace(
            "Write a note (", "Write a note to the notebook ("
        ),
        encoding="utf-8",
    )

    stale = unasync.main(["--check"])
    said = capsys.readouterr()
    written = unasync.main([])
    fresh = unasync.main(["--check"])

    assert (stale, written, fresh) == (1, 0, 0)
    assert "_sync/shared.py" in said.err
    assert "Write a note to the notebook (" in (package / "_sync" / "shared.py").read_text()
