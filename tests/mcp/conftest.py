"""The ``meshctl mcp`` server driven by the official ``mcp`` client over stdio.

``scripts/test.sh`` installs the SDK with the test extra; without it these tests are
skipped with that reason. Every server is a real ``python -m meshctl mcp`` subprocess
talking to the test's real meshd.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp SDK is not installed: pip install 'session-mesh[mcp]'")

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


@asynccontextmanager
async def mcp_session(
    env: dict[str, str], *args: str, cwd: Path | str | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized client session with ``meshctl mcp ARGS`` (started in ``cwd``)."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "meshctl", "mcp", *args], env=env,
        cwd=str(cwd) if cwd else None,
    )  # fmt: skip
    with open(Path(env["MESH_STATE_DIR"]).parent / "mcp-stderr.log", "a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


async def call(session: ClientSession, name: str, args: dict[str, Any] | None = None) -> str:
    """A tool call's text (the result has one text part)."""
    result = await session.call_tool(name, args or {})
    assert len(result.content) == 1
    return str(result.content[0].text)  # type: ignore[union-attr]


def doc(text: str) -> Any:
    """The JSON document at the head of a tool's text (what arrived follows it)."""
    return json.JSONDecoder().raw_decode(text)[0]
