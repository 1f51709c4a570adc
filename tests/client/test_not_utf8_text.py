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

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from tests.client.test_both_drivers import do

from meshctl import AsyncMesh, BadKey, InvalidParams, Mesh

KEY = "file:/tmp/caf\udce9"  # the Latin-1 byte 0xe9, as Python reads it
SHOWN = "file:/tmp/caf\\xe9"


@asynccontextmanager
async def session_of(driver: str) -> AsyncIterator[tuple[Any, Any]]:
    """A Mesh and a session of it, of the blocking or the async driver."""
    if driver == "blocking":
        with Mesh() as mesh, mesh.session(task="t") as s:
            yield mesh, s
    else:
        async with AsyncMesh() as mesh, mesh.session(task="t") as s:
            yield mesh, s


def entered(session: Any) -> Any:
    """Register ``session`` (a context manager of either driver) without leaving it."""
    return session.__enter__() if hasattr(session, "__enter__") else session.__aenter__()


async def _refusals(driver: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with session_of(driver) as (mesh, s):
        for name, call in {
            "claim": lambda: s.claim(KEY),
            "claim_many": lambda: s.claim("res:fine", KEY),
            "check": lambda: s.check(KEY),
            "note": lambda: s.notes.add("caf\udce9 is open"),
            "task": lambda: entered(mesh.session(task="caf\udce9")),
        }.items():
            try:
                await do(call())
            except Exception as exc:  # the failure this test is about (was UnicodeEncodeError)
                out[name] = exc
        out["after"] = (await do(s.claim("res:after"))).granted
        out["listed"] = str(await do(mesh.call("claim.list", {})))
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


@pytest.mark.anyio
@pytest.mark.parametrize("driver", ["blocking", "async"])
async def test_refused_before_sending(daemon: Any, driver: str) -> None:
    _assert_refused(await _refusals(driver))


# --- numbers JSON cannot carry ------------------------------------------------------

NOT_JSON = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


@pytest.mark.anyio
@pytest.mark.parametrize("driver", ["blocking", "async"])
async def test_nan_and_infinity_are_refused_before_sending(daemon: Any, driver: str) -> None:
    """NaN, Infinity and -Infinity in params (Python's json writes them; JSON has no
    such numbers) reached the daemon, which could only answer with an error of no id:
    the call failed with MeshProtocolError and the connection was given up. Now the
    client refuses them as ``InvalidParams`` naming the field, nothing is sent, and the
    connection goes on serving (fails before)."""
    refused: dict[str, Any] = {}
    async with session_of(driver) as (mesh, s):
        for shown, number in NOT_JSON.items():
            try:
                await do(s.signal("sig-x").emit({"rows": [1, number]}))
            except Exception as exc:  # the failure this test is about (was MeshProtocolError)
                refused[shown] = exc
        emitted = await do(mesh.call("signal.wait", {"name": "sig-x", "timeout": 0}))

    for shown, exc in refused.items():
        assert isinstance(exc, InvalidParams), (shown, repr(exc))
        assert exc.data["path"] == "$.payload.rows[1]"
        assert f"$.payload.rows[1] is {shown}, which JSON cannot carry" in exc.message
    assert sorted(refused) == sorted(NOT_JSON)
    assert emitted.get("seq") is None, emitted  # nothing was sent; the connection serves
