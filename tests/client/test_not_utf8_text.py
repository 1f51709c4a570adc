"""Text that is not UTF-8 given to the library (``"file:/tmp/\\udcff"``: a file name's
bytes read with ``surrogateescape``), through both drivers against the real daemon.

The JSON encoder raised ``UnicodeEncodeError`` out of ``claim()``, ``check()``,
``notes.add()`` …, an error outside the mesh's tree that said nothing of what to do.
Now a resource key is refused as ``BadKey`` (as the daemon refuses a key that resolves
to such a name), any other text as ``InvalidParams`` naming the field in
``data.path``; nothing is sent, and the connection goes on serving
(docs/CONFORMANCE.md, "text that is not UTF-8 in the client library").
"""

from __future__ import annotations

from typing import Any

import pytest

from meshctl import AsyncMesh, BadKey, InvalidParams, Mesh

KEY = "file:/tmp/caf\udce9"  # the Latin-1 byte 0xe9, as Python reads it
SHOWN = "file:/tmp/caf\\xe9"


def _refusals_blocking() -> dict[str, Any]:
    out: dict[str, Any] = {}
    with Mesh() as mesh, mesh.session(task="t") as s:
        for name, call in {
            "claim": lambda: s.claim(KEY),
            "claim_many": lambda: s.claim("res:fine", KEY),
            "check": lambda: s.check(KEY),
            "note": lambda: s.notes.add("caf\udce9 is open"),
            "task": lambda: mesh.session(task="caf\udce9").__enter__(),
        }.items():
            try:
                call()
            except Exception as exc:  # the failure this test is about (was UnicodeEncodeError)
                out[name] = exc
        out["after"] = s.claim("res:after").granted
        out["listed"] = str(mesh.call("claim.list", {}))
    return out


async def _refusals_async() -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with AsyncMesh() as mesh, mesh.session(task="t") as s:
        for name, call in {
            "claim": lambda: s.claim(KEY),
            "claim_many": lambda: s.claim("res:fine", KEY),
            "check": lambda: s.check(KEY),
            "note": lambda: s.notes.add("caf\udce9 is open"),
            "task": lambda: mesh.session(task="caf\udce9").__aenter__(),
        }.items():
            try:
                await call()
            except Exception as exc:  # the failure this test is about (was UnicodeEncodeError)
                out[name] = exc
        out["after"] = (await s.claim("res:after")).granted
        out["listed"] = str(await mesh.call("claim.list", {}))
    return out


def _assert_refused(out: dict[str, Any]) -> None:
    for name in ("claim", "claim_many", "check"):
        exc = out[name]
        assert isinstance(exc, BadKey), (name, repr(exc))
        assert exc.data["key"] == SHOWN
        assert f"'{SHOWN}'" in exc.message
        assert "not valid UTF-8" in exc.message
    note = out["note"]
    assert isinstance(note, InvalidParams), repr(note)
    assert note.data["path"] == "$.text"
    assert "caf\\xe9 is open" in note.message
    task = out["task"]
    assert isinstance(task, InvalidParams), repr(task)
    assert task.data["path"] == "$.task"
    # Nothing of the refused claim was sent (res:fine was not claimed with it), and
    # the connection still serves.
    assert out["after"] is True
    assert "res:after" in out["listed"]
    assert "res:fine" not in out["listed"], out["listed"]


def test_blocking(daemon: Any) -> None:
    _assert_refused(_refusals_blocking())


@pytest.mark.anyio
async def test_async(daemon: Any) -> None:
    _assert_refused(await _refusals_async())
