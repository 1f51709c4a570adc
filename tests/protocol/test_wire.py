"""The wire contract of SPEC §3, spoken byte for byte to a real daemon.

Only what needs the socket is here: frames and their size limit, the connection
staying open after an error, notifications answered by nothing, introspection
of the live daemon. Every other dispatch rule is a unit test (``test_dispatch.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support import Client

from meshd.protocol.framing import MAX_FRAME


class Wire(Client):
    """A raw connection: JSON values out, parsed lines back."""

    def rpc(self, obj: Any) -> Any:
        self.send(json.dumps(obj).encode() + b"\n")
        return self.reply()

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


@pytest.fixture
def wire(daemon: Any) -> Iterator[Wire]:
    w = Wire(daemon.socket, timeout=5)
    yield w
    w.sock.close()


def req(method: str, rid: Any = 1, **params: Any) -> dict[str, Any]:
    r: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params:
        r["params"] = params
    return r


class TestFraming:
    def test_parse_error_keeps_the_connection(self, wire: Wire) -> None:
        """A line that is not JSON gets -32700 with id null; the next line still works."""
        wire.send(b"{not json\n")
        err = wire.reply()

        assert err["error"]["code"] == -32700
        assert err["id"] is None
        assert wire.rpc(req("mesh.ping", 2))["result"]["pong"] is True

    def test_oversized_frame_is_refused_and_closed(self, wire: Wire, daemon: Any) -> None:
        """Over 1 MiB without a newline: -32600, then the connection closes; others go on."""
        try:
            wire.send(b"[" + b"1," * (MAX_FRAME // 2 + 10))
        except BrokenPipeError:
            pass
        err = wire.reply()

        assert err["error"]["code"] == -32600
        assert err["error"]["data"]["code"] == "FRAME_TOO_LARGE"
        assert wire.closed()
        assert daemon.call("mesh.ping")["result"]["pong"] is True

    def test_frame_just_under_the_limit_is_read(self, wire: Wire) -> None:
        """A frame of nearly 1 MiB is a frame like any other."""
        pad = "x" * (MAX_FRAME - 200)
        reply = wire.rpc({"jsonrpc": "2.0", "id": 3, "method": "mesh.ping", "pad": pad})

        assert reply["result"]["pong"] is True


class TestEnvelope:
    def test_notification_gets_no_reply(self, wire: Wire) -> None:
        """No id: no answer, not even for an unknown method."""
        wire.send(b'{"jsonrpc":"2.0","method":"no.such"}\n')
        wire.send(b'{"jsonrpc":"2.0","method":"mesh.ping"}\n')

        assert wire.rpc(req("mesh.ping", 12))["id"] == 12


class TestBatches:
    def test_each_element_answered(self, wire: Wire) -> None:
        """A mixed batch: results and errors, matched by id, notifications skipped."""
        batch = [
            req("mesh.ping", 1),
            {"jsonrpc": "2.0", "method": "mesh.ping"},
            req("no.such", 2),
            1,
        ]
        replies = wire.rpc(batch)

        assert isinstance(replies, list)
        by_id = {r["id"]: r for r in replies if r["id"] is not None}
        assert by_id[1]["result"]["pong"] is True
        assert by_id[2]["error"]["code"] == -32601
        assert [r["error"]["code"] for r in replies if r["id"] is None] == [-32600]
        assert len(replies) == 3


class TestIntrospection:
    def test_info(self, wire: Wire) -> None:
        info = wire.rpc(req("mesh.info"))["result"]

        assert info["protocol_version"].startswith("1.")
        assert info["profile"] == "test"
        assert "sessions" in info["capabilities"]
        assert info["counts"]["connections"] >= 1


def test_every_schema_method_is_served(wire: Wire) -> None:
    """The schema lists what the daemon serves: no listed method is unknown to it."""
    names = wire.rpc(req("mesh.schema"))["result"]["methods"]

    for i, name in enumerate(names):
        reply = wire.rpc({"jsonrpc": "2.0", "id": i, "method": name, "params": {}})
        assert reply.get("error", {}).get("code") != -32601, name
