"""Fuzzing the real daemon over its real socket (hypothesis).

Random bytes, deep nesting, huge numbers, invalid UTF-8, NUL bytes, wrong types,
unknown fields, batches of junk, and every method that ``mesh.schema`` lists with
params generated from its own JSON Schema and then broken on purpose. After each
example: the fuzzing connection got only well-formed JSON-RPC frames (or was
closed), and the daemon answers ``mesh.ping`` on a new connection. Every socket
has a timeout, so a hang fails instead of hanging. The method list is read from the
running daemon, so methods that land later (claims, messages …) are fuzzed too.

The default profile keeps the file under 30 s; the ``slow`` twins run longer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conftest import DaemonHandle, MeshEnv
from tests.hardening.schema_strategy import JSON, encode, from_schema, mutated
from tests.hardening.support import is_reply, ping
from tests.support import Client

SENTINEL_ID = "sentinel-7f3a"
SENTINEL = b'{"jsonrpc":"2.0","id":"' + SENTINEL_ID.encode() + b'","method":"mesh.ping"}\n'
INTERNAL_ERROR = -32603


def fuzz_settings(n: int) -> settings:
    return settings(
        max_examples=n,
        deadline=None,
        derandomize=True,  # deterministic: the same examples every run
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def is_frame(value: Any) -> bool:
    """A reply, a batch of replies, or an event notification."""
    if isinstance(value, list):
        return bool(value) and all(is_reply(v) for v in value)
    if isinstance(value, dict) and "id" not in value:
        return value.get("jsonrpc") == "2.0" and value.get("method") == "event"
    return is_reply(value)


def exchange(d: DaemonHandle, frames: list[bytes]) -> list[Any]:
    """Send ``frames`` then a sentinel ping on one connection; return every frame read back.

    Stops at the sentinel's reply or when the daemon closes the connection; a
    daemon that does neither within the socket timeout fails the test.
    """
    seen: list[Any] = []
    with Client(d.socket) as c:
        try:
            for f in frames:
                c.send(f)
            c.send(SENTINEL)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed on us (a frame over 1 MiB): allowed, read what was sent
        while (line := c.line()) is not None:
            value = json.loads(line)
            assert is_frame(value), line[:300]
            if isinstance(value, dict) and value.get("id") == SENTINEL_ID:
                break
            seen.append(value)
    assert ping(d.socket), "the daemon stopped answering new connections"
    return seen


def replies(frames: list[Any]) -> Iterator[dict[str, Any]]:
    for f in frames:
        yield from (f if isinstance(f, list) else [f])


def no_internal_errors(frames: list[Any]) -> None:
    """Bad input is the client's fault: never -32603."""
    bad = [r for r in replies(frames) if r.get("error", {}).get("code") == INTERNAL_ERROR]
    assert not bad, bad[:3]


# anyio's raw-socket streams (asyncio backend) wait with loop.add_reader(sock,
# f.set_result, None) and remove the reader from the future's done-callback; when a
# connection's task is cancelled just as its socket turns readable, the reader fires
# on the cancelled future and asyncio logs this. Harmless, and not meshd's code.
_ANYIO_READER_RACE = re.compile(
    r"Exception in callback Future\.set_result\(None\)\nhandle: <Handle Future\.set_result"
    r"\(None\)>\nTraceback \(most recent call last\):\n(?:  .*\n)+"
    r"asyncio\.exceptions\.InvalidStateError: invalid state\n"
)


@pytest.fixture
def mesh_env(mesh_env: MeshEnv) -> MeshEnv:
    """Waits the fuzzer may start without a session (``signal.wait``) end well within
    its socket timeout, even five in one batch: a bounded wait is not a hang."""
    mesh_env.write_config("[defaults]\nmax_query_timeout = 1\n")
    return mesh_env


@pytest.fixture
def log_is_clean(daemon: DaemonHandle) -> Iterator[DaemonHandle]:
    """The daemon logged no traceback while being fuzzed (a caught crash is still a bug)."""
    yield daemon
    logs = _ANYIO_READER_RACE.sub("", daemon.logs())
    assert "Traceback" not in logs, logs[-3000:]


# --- strategies -------------------------------------------------------------------------

ENVELOPE_JUNK = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": JSON | st.just("2.0"),
        "id": JSON | st.integers() | st.just(2**70) | st.just(1e400),
        "method": JSON | st.sampled_from(["mesh.ping", "session.list", "", "\x00", "a" * 10_000]),
        "params": JSON,
        "extra": JSON,
    },
)


def deep_frame(n: int, where: str) -> bytes:
    nest = b"[" * n + b"]" * n
    return {
        "top": nest,
        "object": b'{"a":' * n + b"1" + b"}" * n,
        "batch": b"[" + nest + b"]",
        "params": b'{"jsonrpc":"2.0","id":1,"method":"session.register","params":{"tools":'
        + nest
        + b"}}",
        "id": b'{"jsonrpc":"2.0","id":' + nest + b',"method":"mesh.ping"}',
        "method": b'{"jsonrpc":"2.0","id":1,"method":' + nest + b"}",
    }[where]


STRUCTURED = st.one_of(
    ENVELOPE_JUNK.map(lambda v: json.dumps(v).encode()),
    st.lists(ENVELOPE_JUNK | JSON, min_size=1, max_size=20).map(lambda v: json.dumps(v).encode()),
    st.builds(
        deep_frame,
        st.integers(1_000, 100_000),
        st.sampled_from(["top", "object", "batch", "params", "id", "method"]),
    ),
    st.sampled_from(
        [
            b'{"jsonrpc":"2.0","id":1,"method":"session.register","params":{"pid":1e400}}',
            b'{"jsonrpc":"2.0","id":1,"method":"session.register","params":{"pid":'
            + b"9" * 5000
            + b"}}",
            b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"mesh.ping"}',
            b'{"jsonrpc":"2.0","id":1,"method":"session.register","params":{"task":"\xff\xfe"}}',
            b'{"jsonrpc":"2.0","id":1,"method":"mesh.\x00ping"}',
            b'{"jsonrpc":"2.0","id":1,"method":"session.register","params":{"task":"a\\u0000b"}}',
            b'{"jsonrpc":"2.0","id":1,"method":"session.get","params":{"session_id":"\\ud800"}}',
            b"\x00" * 100,
            b"[]",
            b"[[]]",
            b"[1,2,3]",
            b'"\\u',
            b"NaN",
            b"-0",
        ]
    ),
)


# --- tests --------------------------------------------------------------------------------


def run_bytes(d: DaemonHandle, n: int) -> None:
    @fuzz_settings(n)
    @given(st.lists(st.binary(max_size=2048), min_size=1, max_size=4))
    def check(chunks: list[bytes]) -> None:
        exchange(d, [c + b"\n" for c in chunks])

    check()


def run_structured(d: DaemonHandle, n: int) -> None:
    @fuzz_settings(n)
    @given(st.lists(STRUCTURED, min_size=1, max_size=3))
    def check(frames: list[bytes]) -> None:
        no_internal_errors(exchange(d, [f + b"\n" for f in frames]))

    check()


def method_calls(schema: dict[str, Any]) -> st.SearchStrategy[tuple[str, Any]]:
    defs = schema["$defs"]
    per_method = [
        st.tuples(st.just(name), mutated(from_schema(spec["params"], defs)) | st.none())
        for name, spec in sorted(schema["methods"].items())
    ]
    return st.one_of(per_method)


WAITS = ("timeout", "wait")
"""Parameters that make a request wait: a batch runs its entries one after another
(server.py ``_batch``), so five ``signal.wait`` at their 10 s default outlast the
client's socket timeout although the daemon is right. The fuzz keeps every wait
under a second; the parameters' validation is fuzzed as before."""


def tame(params: Any) -> Any:
    """``params`` with any numeric wait above 0.5 s cut to 0.5 s, and a missing one set."""
    if not isinstance(params, dict):
        return params
    out = dict(params)
    for key in WAITS:
        value = out.get(key)
        if value is None or (
            isinstance(value, int | float) and not isinstance(value, bool) and value > 0.5
        ):
            out[key] = 0.5
    return out


def run_methods(d: DaemonHandle, n: int) -> None:
    schema = d.call("mesh.schema")["result"]
    calls = method_calls(schema)
    defs = schema["$defs"]

    def fields(spec: dict[str, Any]) -> dict[str, Any]:
        ref = spec.get("$ref", "")
        return dict((defs[ref.rsplit("/", 1)[-1]] if ref else spec).get("properties", {}))

    waits = {
        name
        for name, spec in schema["methods"].items()
        if any(k in fields(spec["params"]) for k in WAITS)
    }
    assert {"signal.wait", "claim.acquire"} <= waits, sorted(waits)

    @fuzz_settings(n)
    @given(st.lists(calls, min_size=1, max_size=5), st.booleans())
    def check(batch: list[tuple[str, Any]], as_batch: bool) -> None:
        reqs = [
            {"jsonrpc": "2.0", "id": i, "method": name}
            | ({} if params is None else {"params": tame(params) if name in waits else params})
            for i, (name, params) in enumerate(batch)
        ]
        frames = [encode(reqs) + b"\n"] if as_batch else [encode(r) + b"\n" for r in reqs]
        seen = exchange(d, frames)
        no_internal_errors(seen)

    check()


PROFILES: list[tuple[Callable[[DaemonHandle, int], None], int, int]] = [
    (run_bytes, 150, 3000),
    (run_structured, 150, 3000),
    (run_methods, 300, 5000),
]


@pytest.mark.parametrize(
    ("run", "n"), [(r, n) for r, n, _ in PROFILES], ids=lambda v: getattr(v, "__name__", str(v))
)
def test_fuzz(log_is_clean: DaemonHandle, run: Callable[[DaemonHandle, int], None], n: int) -> None:
    """Whatever arrives, the daemon answers well-formed frames or closes, and keeps serving."""
    run(log_is_clean, n)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("run", "n"), [(r, n) for r, _, n in PROFILES], ids=lambda v: getattr(v, "__name__", str(v))
)
def test_fuzz_long(
    log_is_clean: DaemonHandle, run: Callable[[DaemonHandle, int], None], n: int
) -> None:
    """The same, with many more examples."""
    run(log_is_clean, n)


class TestDeepNesting:
    @pytest.mark.parametrize("where", ["top", "object", "batch", "params", "id", "method"])
    def test_100k_nested_is_refused_and_the_connection_stays_open(
        self, log_is_clean: DaemonHandle, where: str
    ) -> None:
        """100,000 nested arrays anywhere in a frame: an error reply, and the line is still open."""
        seen = exchange(log_is_clean, [deep_frame(100_000, where) + b"\n"])

        assert len(seen) == 1
        (reply,) = replies(seen)
        assert reply["error"]["code"] in (-32600, -32602)


def test_empty_release_list_is_not_internal(daemon: DaemonHandle) -> None:
    """Once a KNOWN_ISSUES entry: an empty resources list releases nothing, no -32603."""
    daemon.call("session.register", {"session_id": "s"})
    reply = daemon.call("claim.release", {"session_id": "s", "resources": []})

    assert reply["result"]["released"] == []
