"""JSON-RPC dispatch (SPEC §3) without a socket: frames in, reply frames out.

:class:`meshd.protocol.jsonrpc.Dispatcher` is driven with the method table of a
real :class:`~meshd.service.Service` (every domain of ``app.wire``, a manual
clock, a store that is never opened: none of these requests reaches it). The
few rules that need a socket (frame size, the connection staying open) are in
``test_wire.py``, against a real daemon.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.support import profile_paths

from meshd.app import wire
from meshd.core.clock import ManualClock
from meshd.core.settings import Settings
from meshd.core.state import MeshState
from meshd.protocol.errors import BadKey, InternalError
from meshd.protocol.jsonrpc import Call, Dispatcher, Later, failure
from meshd.protocol.jsonrpc import reply as reply_of
from meshd.service import Conn, Service
from meshd.store import Store


class Rpc:
    """A dispatcher over a real method table."""

    def __init__(self, svc: Service) -> None:
        self.svc = svc
        self.dispatch = Dispatcher(svc.lookup)
        self.conn = Conn(1)

    async def raw(self, line: bytes) -> Any:
        """The parsed reply to one frame, or None when there is none."""
        reply = await self.dispatch.frame(line, self.conn)
        return None if reply is None else json.loads(reply)

    async def call(self, obj: Any) -> Any:
        return await self.raw(json.dumps(obj).encode())


@pytest.fixture
def rpc(tmp_path: Path) -> Rpc:
    root = tmp_path
    paths = profile_paths(root)
    state = MeshState(ManualClock(), Settings(), "test")
    return Rpc(Service(state, Store(paths.database), paths, domains=wire))


def req(method: str, rid: Any = 1, **params: Any) -> dict[str, Any]:
    r: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params:
        r["params"] = params
    return r


class TestFrames:
    async def test_parse_error_has_id_null(self, rpc: Rpc) -> None:
        err = await rpc.raw(b"{not json")

        assert err["error"]["code"] == -32700
        assert err["id"] is None

    async def test_blank_lines_get_no_reply(self, rpc: Rpc) -> None:
        assert await rpc.raw(b"") is None
        assert await rpc.raw(b"  \r") is None

    async def test_invalid_utf8_is_a_parse_error(self, rpc: Rpc) -> None:
        err = await rpc.raw(b'{"jsonrpc":"2.0","id":1,"method":"\xff\xfe"}')

        assert err["error"]["code"] == -32700

    async def test_nested_too_deeply_is_an_invalid_request(self, rpc: Rpc) -> None:
        """Past the recursion limit msgspec raises RecursionError: -32600, not a crash."""
        err = await rpc.raw(b"[" * 100_000 + b"]" * 100_000)

        assert err["error"]["code"] == -32600
        assert err["error"]["data"]["code"] == "INVALID_REQUEST"

    async def test_params_nested_too_deeply_too(self, rpc: Rpc) -> None:
        """Even skipping raw params recurses: the whole request is refused, id unread."""
        deep = b"[" * 100_000 + b"]" * 100_000
        err = await rpc.raw(b'{"jsonrpc":"2.0","id":4,"method":"mesh.ping","params":' + deep + b"}")

        assert err["error"]["code"] == -32600
        assert err["id"] is None


class TestEnvelope:
    async def test_reply_carries_version_and_id(self, rpc: Rpc) -> None:
        reply = await rpc.call(req("mesh.ping", "abc"))

        assert reply["jsonrpc"] == "2.0"
        assert reply["id"] == "abc"
        assert reply["result"]["pong"] is True

    async def test_unknown_method(self, rpc: Rpc) -> None:
        """-32601, id echoed."""
        reply = await rpc.call(req("no.such", 4))

        assert reply["error"]["code"] == -32601
        assert reply["id"] == 4

    async def test_invalid_params_name_the_json_path(self, rpc: Rpc) -> None:
        """-32602 with data.path pointing at the bad field."""
        reply = await rpc.call(req("session.heartbeat", 5, session_id=12))

        assert reply["error"]["code"] == -32602
        assert reply["error"]["data"]["path"] == "$.session_id"

    async def test_a_methods_first_request_decodes_like_the_rest(self, rpc: Rpc) -> None:
        """Decoders are built at a method's first request (start-up time): the first
        request is refused or served exactly as the later ones, and from then on the
        handler holds msgspec's own decoder."""
        stand_in = rpc.svc.handlers["session.heartbeat"].decode
        first = await rpc.call(req("session.heartbeat", 5, session_id=12))
        built = rpc.svc.handlers["session.heartbeat"].decode
        again = await rpc.call(req("session.heartbeat", 5, session_id=12))

        assert first == again
        assert first["error"]["data"]["path"] == "$.session_id"
        assert built is not stand_in
        assert type(built).__name__ == "builtin_function_or_method"  # msgspec's, no wrapper
        assert rpc.svc.handlers["session.heartbeat"].decode is built

    async def test_unknown_params_field_is_refused(self, rpc: Rpc) -> None:
        reply = await rpc.call(req("session.register", 6, bogus=1))

        assert reply["error"]["code"] == -32602

    async def test_positional_params_are_refused(self, rpc: Rpc) -> None:
        reply = await rpc.call({"jsonrpc": "2.0", "id": 7, "method": "mesh.ping", "params": [1]})

        assert reply["error"]["code"] == -32602

    async def test_wrong_version_is_invalid_request(self, rpc: Rpc) -> None:
        reply = await rpc.call({"jsonrpc": "1.0", "id": 8, "method": "mesh.ping"})

        assert reply["error"]["code"] == -32600
        assert reply["id"] == 8

    async def test_missing_method_keeps_the_id(self, rpc: Rpc) -> None:
        reply = await rpc.call({"jsonrpc": "2.0", "id": 11})

        assert reply["error"]["code"] == -32600
        assert reply["id"] == 11

    async def test_notification_gets_no_reply(self, rpc: Rpc) -> None:
        """No id: no answer, not even for an unknown method or bad params."""
        assert await rpc.call({"jsonrpc": "2.0", "method": "no.such"}) is None
        assert await rpc.call({"jsonrpc": "2.0", "method": "mesh.ping"}) is None
        bad = {"jsonrpc": "2.0", "method": "session.heartbeat", "params": {"session_id": 1}}
        assert await rpc.call(bad) is None

    async def test_mesh_errors_carry_a_stable_code_string(self, rpc: Rpc) -> None:
        reply = await rpc.call(req("session.heartbeat", 13, session_id="ghost"))

        assert reply["error"]["code"] == -32001
        assert reply["error"]["data"]["code"] == "UNKNOWN_SESSION"

    async def test_a_handler_bug_is_internal_and_logged(
        self, rpc: Rpc, caplog: pytest.LogCaptureFixture
    ) -> None:
        """An exception that is not a MeshError: -32603 INTERNAL, the traceback logged."""

        def broken(params: Any, conn: Conn) -> Any:
            raise KeyError("bug")

        h = rpc.svc.handlers["mesh.ping"]
        rpc.svc.handlers["mesh.ping"] = h._replace(fn=broken)
        reply = await rpc.call(req("mesh.ping", 14))

        assert reply["error"]["code"] == -32603
        assert reply["error"]["data"]["code"] == "INTERNAL"
        assert "internal error in mesh.ping" in caplog.text


class TestPrepare:
    def test_a_request_becomes_its_call(self, rpc: Rpc) -> None:
        """The server runs what prepare returns; a concurrent method is marked so."""
        params = {"session_id": "a", "resources": ["k"], "wait": 1}
        call = rpc.dispatch.prepare(json.dumps(req("claim.acquire", 15, **params)).encode())

        assert isinstance(call, Call)
        assert (call.method, call.rid, call.notify) == ("claim.acquire", 15, False)
        assert call.handler.concurrent
        assert call.params.wait == 1

    def test_what_cannot_be_called_is_its_reply(self, rpc: Rpc) -> None:
        reply = rpc.dispatch.prepare(json.dumps(req("no.such", 16)).encode())

        assert isinstance(reply, bytes)
        assert json.loads(reply)["error"]["code"] == -32601
        assert rpc.dispatch.prepare(b'{"jsonrpc":"2.0","method":"no.such"}') is None


class TestFailure:
    """An error reply is always a reply: one whose message or data the encoder refuses
    still answers its request (before, ``failure`` raised, and the caller got nothing)."""

    def test_data_that_cannot_be_encoded_is_left_out(self) -> None:
        reply = json.loads(failure("m", 3, False, BadKey("bad key", {"thing": object()})))  # type: ignore[arg-type]

        assert reply["id"] == 3
        assert reply["error"] == {"code": -32010, "message": "bad key", "data": {"code": "BAD_KEY"}}

    def test_a_message_that_cannot_be_encoded_is_a_plain_internal_error(self) -> None:
        reply = json.loads(failure("m", "x", False, BadKey("key /srv/caf\udce9")))  # type: ignore[arg-type]

        assert reply["id"] == "x"
        assert reply["error"]["code"] == -32603
        assert reply["error"]["data"] == {"code": "INTERNAL"}

    def test_a_waiting_request_whose_error_cannot_be_encoded_is_answered(self) -> None:
        later = Later()
        later.settle(error=InternalError("held \udce9", {"granted": True}))

        reply = json.loads(reply_of(later, "claim.acquire", 9, False))  # type: ignore[arg-type]

        assert (reply["id"], reply["error"]["code"]) == (9, -32603)


class TestBatches:
    async def test_each_element_answered(self, rpc: Rpc) -> None:
        """A mixed batch: results and errors, matched by id, notifications skipped."""
        batch = [
            req("mesh.ping", 1),
            {"jsonrpc": "2.0", "method": "mesh.ping"},
            req("no.such", 2),
            1,
        ]
        replies = await rpc.call(batch)

        assert isinstance(replies, list)
        by_id = {r["id"]: r for r in replies if r["id"] is not None}
        assert by_id[1]["result"]["pong"] is True
        assert by_id[2]["error"]["code"] == -32601
        assert [r["error"]["code"] for r in replies if r["id"] is None] == [-32600]
        assert len(replies) == 3

    async def test_empty_batch_is_one_error(self, rpc: Rpc) -> None:
        reply = await rpc.call([])

        assert isinstance(reply, dict)
        assert reply["error"]["code"] == -32600

    async def test_notification_only_batch_gets_nothing(self, rpc: Rpc) -> None:
        assert await rpc.raw(b'[{"jsonrpc":"2.0","method":"mesh.ping"}]') is None

    async def test_a_batch_that_is_not_json(self, rpc: Rpc) -> None:
        assert (await rpc.raw(b"[1,"))["error"]["code"] == -32700


class TestSchema:
    async def test_schema_covers_every_method_it_serves(self, rpc: Rpc) -> None:
        """mesh.schema lists params and result for each method, from the decoding types."""
        schema = (await rpc.call(req("mesh.schema")))["result"]
        methods = schema["methods"]

        assert set(methods) == set(rpc.svc.handlers)
        reg = methods["session.register"]["params"]
        ref = reg["$ref"].split("/")[-1]
        assert "task" in schema["$defs"][ref]["properties"]
