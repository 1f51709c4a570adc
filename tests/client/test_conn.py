"""The sans-I/O wire layer: frames out, messages in, errors mapped by data.code."""

from __future__ import annotations

import json

import pytest

from meshctl import _conn
from meshctl._core import session as _session
from meshd.protocol import framing
from meshd.protocol.errors import (
    FrameTooLarge,
    InvalidParams,
    MeshError,
    MeshProtocolError,
    SessionExpired,
    UnknownSession,
)


class TestRequest:
    def test_compact_newline_frame(self) -> None:
        """A request is one compact JSON line with jsonrpc, an id, the method and params."""
        proto = _conn.Protocol()

        rid, frame = proto.request("session.heartbeat", {"session_id": "a", "task": "é"})

        assert frame.endswith(b"\n")
        assert frame.count(b"\n") == 1
        assert b" " not in frame
        assert json.loads(frame) == {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "session.heartbeat",
            "params": {"session_id": "a", "task": "é"},
        }

    def test_ids_grow_and_params_omitted(self) -> None:
        """Each request gets a new id; no params means no ``params`` member."""
        proto = _conn.Protocol()

        first, frame = proto.request("mesh.ping")
        second, _ = proto.request("mesh.ping")

        assert second == first + 1
        assert "params" not in json.loads(frame)

    def test_frame_over_limit_refused_before_sending(self) -> None:
        """A request over 1 MiB raises FrameTooLarge naming the size and the fix."""
        proto = _conn.Protocol()

        with pytest.raises(FrameTooLarge, match="1 MiB") as info:
            proto.request("session.register", {"task": "x" * framing.MAX_FRAME})

        assert info.value.data["limit"] == framing.MAX_FRAME


class TestReplies:
    def test_partial_lines_and_blank_lines(self) -> None:
        """Bytes split anywhere reassemble into whole messages; blank lines are skipped."""
        proto = _conn.Protocol()
        wire = b'\n{"jsonrpc":"2.0","id":1,"result":{"pong":true}}\n\n'

        out = []
        for byte in wire:
            proto.feed(bytes([byte]))
            while (msg := proto.next_message()) is not None:
                out.append(msg)

        assert out == [_conn.Reply(1, result={"pong": True})]

    def test_take_whole_line_and_pieces(self) -> None:
        """take() parses a lone whole line at once, and buffers pieces and pairs correctly."""
        proto = _conn.Protocol()
        one = b'{"jsonrpc":"2.0","id":1,"result":1}\n'
        two = b'{"jsonrpc":"2.0","id":2,"result":2}\n'

        whole = proto.take(one)
        head = proto.take(two[:10])
        tail = proto.take(two[10:] + one)
        rest = proto.next_message()

        assert whole == _conn.Reply(1, result=1)
        assert head is None
        assert tail == _conn.Reply(2, result=2)
        assert rest == _conn.Reply(1, result=1)
        assert proto.next_message() is None

    def test_event_is_not_a_reply(self) -> None:
        """A notification with method ``event`` and no id comes out as an Event."""
        proto = _conn.Protocol()
        proto.feed(b'{"jsonrpc":"2.0","method":"event","params":{"kind":"message"}}\n')
        proto.feed(b'{"jsonrpc":"2.0","id":7,"result":null}\n')

        first, second = proto.next_message(), proto.next_message()

        assert first == _conn.Event({"kind": "message"})
        assert second == _conn.Reply(7, result=None)

    @pytest.mark.parametrize(
        ("code", "data_code", "cls"),
        [
            (-32002, "SESSION_EXPIRED", SessionExpired),
            (-32001, "UNKNOWN_SESSION", UnknownSession),
            (-32602, "INVALID_PARAMS", InvalidParams),
        ],
    )
    def test_error_becomes_its_class(self, code: int, data_code: str, cls: type) -> None:
        """An error object turns into the exception for its data.code, data kept."""
        line = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "error": {"code": code, "message": "m", "data": {"code": data_code, "path": "$.x"}},
            }
        ).encode()

        reply = _conn.parse_line(line)

        assert isinstance(reply, _conn.Reply)
        with pytest.raises(cls) as info:
            reply.unwrap()
        assert isinstance(info.value, MeshError)
        assert info.value.data["path"] == "$.x"

    @pytest.mark.parametrize(
        "line", [b"not json", b"[1,2]", b'{"jsonrpc":"2.0","id":1}', b'{"method":"other"}']
    )
    def test_garbage_is_a_protocol_error(self, line: bytes) -> None:
        """What breaks the contract raises MeshProtocolError, quoting the line."""
        with pytest.raises(MeshProtocolError):
            _conn.parse_line(line)


class TestVersion:
    def test_same_major_accepted(self) -> None:
        """Protocol 1.x is ours."""
        _conn.check_protocol({"protocol_version": "1.7"}, "sock")

    def test_other_major_names_both(self) -> None:
        """Another major version is refused with both versions in the message."""
        with pytest.raises(MeshProtocolError, match=r"speaks protocol 2\.0.*speaks 1\.x"):
            _conn.check_protocol({"protocol_version": "2.0"}, "sock")


class TestSessionCore:
    def make(self) -> _session.SessionCore:
        return _session.SessionCore(
            task="t", session_id=None, liveness="heartbeat", bind=True, fields={"source": "cli"}
        )

    def test_register_params(self) -> None:
        """Register params carry pid, cwd, bind and, once known, the same id."""
        core = self.make()
        assert "session_id" not in core.register_params()
        assert core.register_params()["bind"] is True

        core.registered({"session_id": "cli:1", "heartbeat_interval": 2}, (1, "a"), None)

        assert core.register_params()["session_id"] == "cli:1"
        assert core.interval == 2.0

    def test_restart_restored_loses_nothing(self) -> None:
        """A refreshed registration after a restart with every token valid records nothing."""
        core = self.make()
        core.registered({"session_id": "cli:1"}, (2, "b"), None)

        assert core.after_restart((1, "a"), {"session_id": "cli:1", "refreshed": True}, []) is None
        assert "pid 1 -> 2" in str(core.after_restart((1, "a"), {"session_id": "cli:1"}, []))

    def test_restart_names_each_lost_claim(self) -> None:
        """Restored, but a token no longer validates: the message names that claim only."""
        core = self.make()
        core.registered({"session_id": "cli:1"}, (2, "b"), None)
        core.granted(3, ["file:/a", "file:/b"])
        core.granted(4, ["port:80"])

        core.invalid([("file:/b", 3)])
        message = core.after_restart((1, "a"), {"refreshed": True}, [("file:/b", 3)])

        assert message is not None
        assert "restored the session" in message
        assert "file:/b (token 3)" in message
        assert "file:/a" not in message
        assert "port:80" not in message
        assert core.is_lost(3, ["file:/b"])
        assert not core.is_lost(3, ["file:/a"])
        assert core.to_validate() == [("file:/a", 3), ("port:80", 4)]

    def test_expiry_message(self) -> None:
        """An expiry names the code, says it re-registered and which claims were released."""
        core = self.make()
        core.registered({"session_id": "cli:1"}, (1, "a"), None)

        message = core.after_expiry(SessionExpired("gone"), (1, "a"), [("res:x", 7)])
        nothing = core.after_expiry(SessionExpired("gone"), (1, "a"), [])

        assert "expired at the daemon" in message
        assert "re-registered" in message
        assert "claims it held were released: res:x (token 7)" in message
        assert "it held no claims" in nothing
        assert isinstance(SessionExpired("x"), MeshError)
