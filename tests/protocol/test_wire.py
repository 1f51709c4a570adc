"""The wire contract of SPEC §3, spoken byte for byte to a real daemon."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from meshd.protocol.framing import MAX_FRAME


class Wire:
    """A raw connection: send lines, read lines."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(5)
        self.sock.connect(path)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def line(self) -> Any:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    def call(self, obj: Any) -> Any:
        self.send(json.dumps(obj).encode() + b"\n")
        return self.line()

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


@pytest.fixture
def wire(daemon: Any) -> Iterator[Wire]:
    w = Wire(str(daemon.socket))
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
        err = wire.line()

        assert err["error"]["code"] == -32700
        assert err["id"] is None
        assert wire.call(req("mesh.ping", 2))["result"]["pong"] is True

    def test_blank_lines_are_ignored(self, wire: Wire) -> None:
        """Blank lines get no answer at all."""
        wire.send(b"\n  \n\r\n")

        assert wire.call(req("mesh.ping", 9))["id"] == 9

    def test_oversized_frame_is_refused_and_closed(self, wire: Wire, daemon: Any) -> None:
        """Over 1 MiB without a newline: -32600, then the connection closes; others go on."""
        try:
            wire.send(b"[" + b"1," * (MAX_FRAME // 2 + 10))
        except BrokenPipeError:
            pass
        err = wire.line()

        assert err["error"]["code"] == -32600
        assert err["error"]["data"]["code"] == "FRAME_TOO_LARGE"
        assert wire.closed()
        assert daemon.call("mesh.ping")["result"]["pong"] is True

    def test_frame_just_under_the_limit_is_read(self, wire: Wire) -> None:
        """A frame of nearly 1 MiB is a frame like any other."""
        pad = "x" * (MAX_FRAME - 200)
        reply = wire.call({"jsonrpc": "2.0", "id": 3, "method": "mesh.ping", "pad": pad})

        assert reply["result"]["pong"] is True

    def test_invalid_utf8_is_a_parse_error(self, wire: Wire) -> None:
        wire.send(b'{"jsonrpc":"2.0","id":1,"method":"\xff\xfe"}\n')

        assert wire.line()["error"]["code"] == -32700


class TestEnvelope:
    def test_reply_carries_version_and_id(self, wire: Wire) -> None:
        reply = wire.call(req("mesh.ping", "abc"))

        assert reply["jsonrpc"] == "2.0"
        assert reply["id"] == "abc"

    def test_unknown_method(self, wire: Wire) -> None:
        """-32601, id echoed."""
        reply = wire.call(req("no.such", 4))

        assert reply["error"]["code"] == -32601
        assert reply["id"] == 4

    def test_invalid_params_name_the_json_path(self, wire: Wire) -> None:
        """-32602 with data.path pointing at the bad field."""
        reply = wire.call(req("session.heartbeat", 5, session_id=12))

        assert reply["error"]["code"] == -32602
        assert reply["error"]["data"]["path"] == "$.session_id"

    def test_unknown_params_field_is_refused(self, wire: Wire) -> None:
        reply = wire.call(req("session.register", 6, bogus=1))

        assert reply["error"]["code"] == -32602

    def test_positional_params_are_refused(self, wire: Wire) -> None:
        reply = wire.call({"jsonrpc": "2.0", "id": 7, "method": "mesh.ping", "params": [1]})

        assert reply["error"]["code"] == -32602

    def test_wrong_version_is_invalid_request(self, wire: Wire) -> None:
        reply = wire.call({"jsonrpc": "1.0", "id": 8, "method": "mesh.ping"})

        assert reply["error"]["code"] == -32600
        assert reply["id"] == 8

    def test_missing_method_keeps_the_id(self, wire: Wire) -> None:
        reply = wire.call({"jsonrpc": "2.0", "id": 11})

        assert reply["error"]["code"] == -32600
        assert reply["id"] == 11

    def test_notification_gets_no_reply(self, wire: Wire) -> None:
        """No id: no answer, not even for an unknown method."""
        wire.send(b'{"jsonrpc":"2.0","method":"no.such"}\n')
        wire.send(b'{"jsonrpc":"2.0","method":"mesh.ping"}\n')

        assert wire.call(req("mesh.ping", 12))["id"] == 12

    def test_mesh_errors_carry_a_stable_code_string(self, wire: Wire) -> None:
        reply = wire.call(req("session.heartbeat", 13, session_id="ghost"))

        assert reply["error"]["code"] == -32001
        assert reply["error"]["data"]["code"] == "UNKNOWN_SESSION"


class TestBatches:
    def test_each_element_answered(self, wire: Wire) -> None:
        """A mixed batch: results and errors, matched by id, notifications skipped."""
        batch = [
            req("mesh.ping", 1),
            {"jsonrpc": "2.0", "method": "mesh.ping"},
            req("no.such", 2),
            1,
        ]
        replies = wire.call(batch)

        assert isinstance(replies, list)
        by_id = {r["id"]: r for r in replies if r["id"] is not None}
        assert by_id[1]["result"]["pong"] is True
        assert by_id[2]["error"]["code"] == -32601
        assert [r["error"]["code"] for r in replies if r["id"] is None] == [-32600]
        assert len(replies) == 3

    def test_empty_batch_is_one_error(self, wire: Wire) -> None:
        reply = wire.call([])

        assert isinstance(reply, dict)
        assert reply["error"]["code"] == -32600

    def test_notification_only_batch_gets_nothing(self, wire: Wire) -> None:
        wire.send(b'[{"jsonrpc":"2.0","method":"mesh.ping"}]\n')

        assert wire.call(req("mesh.ping", 21))["id"] == 21


class TestIntrospection:
    def test_info(self, wire: Wire) -> None:
        info = wire.call(req("mesh.info"))["result"]

        assert info["protocol_version"].startswith("1.")
        assert info["profile"] == "test"
        assert "sessions" in info["capabilities"]
        assert info["counts"]["connections"] >= 1

    def test_schema_covers_every_method_it_serves(self, wire: Wire) -> None:
        """mesh.schema lists params and result for each method, from the decoding types."""
        schema = wire.call(req("mesh.schema"))["result"]
        methods = schema["methods"]

        assert {"mesh.ping", "session.register", "session.list"} <= set(methods)
        reg = methods["session.register"]["params"]
        ref = reg["$ref"].split("/")[-1]
        assert "task" in schema["$defs"][ref]["properties"]


def test_every_schema_method_is_served(wire: Wire) -> None:
    """The schema lists what the daemon serves: no listed method is unknown to it."""
    names = wire.call(req("mesh.schema"))["result"]["methods"]

    for i, name in enumerate(names):
        reply = wire.call({"jsonrpc": "2.0", "id": i, "method": name, "params": {}})
        assert reply.get("error", {}).get("code") != -32601, name
