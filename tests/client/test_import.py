"""``import meshctl`` stays cheap, and its public surface is honest."""

from __future__ import annotations

import subprocess
import sys

import meshctl
from meshd.protocol import errors


def test_import_is_cheap() -> None:
    """Importing meshctl and touching Mesh loads no anyio, msgspec, platformdirs or click."""
    code = (
        "import sys, meshctl; meshctl.Mesh; meshctl.MeshError; "
        "print(sorted(m for m in ('anyio','msgspec','platformdirs','click') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    ).stdout

    assert out.strip() == "[]"


def test_async_loads_on_demand() -> None:
    """AsyncMesh is reachable from the package (it loads anyio then)."""
    code = "import sys, meshctl; meshctl.AsyncMesh; print('anyio' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    ).stdout

    assert out.strip() == "True"


def test_all_sorted_and_complete() -> None:
    """__all__ is sorted, resolves, and exports every error class of the shared tree."""
    names = meshctl.__all__
    error_classes = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.MeshError)
    }

    assert names == sorted(names)
    assert all(getattr(meshctl, name) is not None for name in names)
    assert error_classes <= set(names)
    assert {"Mesh", "AsyncMesh", "Session", "AsyncSession"} <= set(names)
