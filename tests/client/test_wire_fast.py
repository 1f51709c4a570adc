"""The client's faster wire (docs/bench-runs/2026-12-01-notebook.md, "The client's call,
fourth pass"): the request frame put together from pieces, the scanner called directly, and msgspec's
decoder for long lines once bought. Each must give exactly what the plain standard
library path gives: the same bytes out, the same values in, the same errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest

from meshctl import _conn
from meshd.protocol.errors import MeshProtocolError

_PLAIN = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def plain_frame(rid: int, method: str, params: Any) -> bytes:
    """The frame as the client wrote it before: the whole dict through ``json``."""
    obj: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        obj["params"] = params
    return (_PLAIN.encode(obj) + "\n").encode()


PARAMS = [
    None,
    {},
    [],
    {"session_id": "s0"},
    {"task": 'é ü 😀 \u2028 \x00 \x1f \\ " / \t\n', "n": 2**70, "f": [0.1, -0.0, 1e300, 5e-324]},
    {"resources": ["res:a", "path:/tmp/x y"], "wait": 1.5, "flag": True, "none": None},
    {"nested": {"deep": [{"a": [1, [2, [3]]]}], "": ""}, "tuple": (1, "two")},
    "a bare string",
    3,
]


class TestFrame:
    @pytest.mark.parametrize("params", PARAMS)
    @pytest.mark.parametrize("method", ["session.heartbeat", "mesh.ping", 'odd "mé\\thod"'])
    def test_byte_for_byte_the_dict_encoding(self, method: str, params: Any) -> None:
        """The frame built from the method's head and the params' encoding is the
        frame the whole request dict encodes to, byte for byte (twice: the head cached)."""
        proto = _conn.Protocol()

        frames = [proto.request(method, params) for _ in range(2)]

        assert [f for _, f in frames] == [plain_frame(rid, method, params) for rid, _ in frames]

    def test_refusals_unchanged(self) -> None:
        """NaN, a lone surrogate and a value json cannot write are refused as before."""
        proto = _conn.Protocol()

        with pytest.raises(Exception, match=r"\$\.x\[1\] is NaN") as nan:
            proto.request("m", {"x": [1, math.nan]})
        with pytest.raises(Exception, match=r"\$\.task is not valid UTF-8") as text:
            proto.request("m", {"task": "a\udcff"})
        with pytest.raises(TypeError, match="not JSON serializable"):
            proto.request("m", {"x": object()})

        assert type(nan.value).__name__ == type(text.value).__name__ == "InvalidParams"


#: What the client decoded every line with before (not ``json.loads``, which refuses a
#: leading byte order mark in its own words before decoding).
json_decode = json.JSONDecoder().decode


def outcome(fn: Any, *args: Any) -> tuple[str, str]:
    """A value's repr (so -0.0, 1 and 1.0 differ), or the error's class and text."""
    try:
        return ("value", repr(fn(*args)))
    except Exception as exc:
        return (type(exc).__name__, str(exc))


PAD = " " * _conn.BIG_LINE  # inside a string: makes any line long
LINES = [
    b'{"jsonrpc":"2.0","id":1,"result":{"ok":true,"lost":[],"interval_s":30.0}}\n',
    b'{"jsonrpc":"2.0","id":1,"result":1}',
    b' {"a":1} \t\r\n',
    b'{"a":1}\n\n',
    b'{"a":1}x',
    b'{"a":1,"a":2}',
    b'{"a":123456789012345678901234567890,"b":-0.0,"c":1E5,"d":-0}',
    b'{"a":1e400,"b":-1e400,"c":1e-400}',
    b'{"a":NaN,"b":Infinity,"c":-Infinity}',
    b'{"a":"\\ud800","b":"\\ud83d\\ude00","c":"\\u0000","d":"\\/"}',
    b'{"a":"\x01"}',
    b'{"a":"\t"}',
    b'{"a":01}',
    b'{"a":1.}',
    b'{"a":1,}',
    b"{'a':1}",
    b'{"a":TRUE}',
    b'\xef\xbb\xbf{"a":1}',
    b'\x0b{"a":1}',
    b'{"a":1}\x0c',
    b"\xff",
    b'{"a":"\xed\xa0\x80"}',
    b'{"\xc3\xa9":"\xe2\x82\xac","b":"\xc2\xa0\x7f"}',
    b"",
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' + b"9" * 5000 + b"}",
]


def long(line: bytes) -> bytes:
    """The same line made long: padding in a string of its object, else whitespace before."""
    if line.startswith(b'{"'):
        return b'{"pad":"%s",' % PAD.encode() + line[1:]
    return PAD.encode() + line


def is_long(line: bytes) -> bool:
    return len(line) >= _conn.BIG_LINE


#: Each line, and the same line made long.
CORPUS = LINES + [long(line) for line in LINES]


def test_the_corpus_has_both() -> None:
    """Every line of the corpus twice: short (the standard library's) and long."""
    assert all(map(is_long, CORPUS[len(LINES) :]))
    assert sum(map(is_long, LINES)) == 2  # the deep nesting, the 5000-digit number


@pytest.mark.parametrize("line", CORPUS, ids=range(len(CORPUS)))
def test_loads_is_json_loads(line: bytes) -> None:
    """The scanner called directly gives the decoder's value, or its own error."""
    try:
        text = line.decode()
    except UnicodeDecodeError:
        return
    assert outcome(_conn.loads, text) == outcome(json_decode, text)


@pytest.fixture
def bought(monkeypatch: pytest.MonkeyPatch) -> Any:
    """msgspec's decoder bought (it is a dependency of the installed package)."""
    compiled = _conn._Compiled()
    assert compiled.buy(), "msgspec is installed with session-mesh"
    monkeypatch.setattr(_conn, "_compiled", compiled)
    return compiled


@pytest.mark.parametrize("line", CORPUS, ids=range(len(CORPUS)))
def test_the_compiled_decoder_changes_nothing(bought: Any, line: bytes) -> None:
    """With msgspec's decoder bought, every line -- long or not, well formed or not --
    gives what the standard library gives: the value, or the same error (a line msgspec
    refuses goes to json, whose answer stands), and parse_line the same message."""
    plain = outcome(lambda: json_decode(line.decode()))

    assert outcome(_conn.loads_line, line) == plain
    assert outcome(_conn.parse_line, line) == outcome(plain_parse, line)


def plain_parse(line: bytes) -> Any:
    """parse_line with the standard library alone."""
    saved, _conn._compiled = _conn._compiled, _conn._Compiled()
    _conn._compiled.decode = False
    try:
        return _conn.parse_line(line)
    finally:
        _conn._compiled = saved


def test_a_listing_through_the_compiled_decoder(bought: Any) -> None:
    """A reply like the 10-session listing decodes to the same Reply either way."""
    session = {"session_id": "s", "task": "t" * 40, "claims": [], "age_s": 0.009, "pid": None}
    line = json.dumps({"jsonrpc": "2.0", "id": 4, "result": {"sessions": [session] * 30}})
    raw = line.encode() + b"\n"

    assert is_long(raw)
    assert _conn.parse_line(raw) == plain_parse(raw)
    with pytest.raises(MeshProtocolError, match="not JSON"):
        _conn.parse_line(raw[:-3] + b"\n")


_RUN = """
import json, sys
{block}
from meshctl import _conn
line = json.dumps({{"jsonrpc": "2.0", "id": 1, "result": {{"t": "x" * 3000}}}}).encode()
seen = []
for _ in range({count}):
    assert _conn.parse_line(line).result == {{"t": "x" * 3000}}
    seen.append(sys.modules.get("msgspec") is not None)
print(json.dumps({{"first": seen[0], "last": seen[-1], "decode": repr(_conn._compiled.decode)}}))
"""


def run(count: int, block: str = "") -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _RUN.format(block=block, count=count)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return dict(json.loads(done.stdout))


def test_bought_only_after_enough_long_lines() -> None:
    """A process that decodes a few long lines (a one-shot ``meshctl sessions active``)
    never imports msgspec; one that keeps decoding them imports it once the standard
    library has decoded BUY_AFTER bytes of them, and uses it from then on."""
    few = run(3)
    many = run(_conn.BUY_AFTER // 3000 + 10)

    assert few == {"first": False, "last": False, "decode": "None"}
    assert many["first"] is False
    assert many["last"] is True
    assert "Decoder" in many["decode"]


def test_without_msgspec_the_standard_library_serves() -> None:
    """Where msgspec cannot be imported (the Hermes plugin's vendored copy), buying
    fails once and every line is decoded by the standard library, to the same values."""
    out = run(_conn.BUY_AFTER // 3000 + 10, block="sys.modules['msgspec'] = None")

    assert out == {"first": False, "last": False, "decode": "False"}
