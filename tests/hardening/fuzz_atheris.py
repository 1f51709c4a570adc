"""Coverage-guided fuzzing (atheris) of the pure decoders the server relies on.

Fuzzes ``meshd.protocol.jsonrpc`` (request, batch and id decoders) and
``jsonrpc.decode_params`` for every method the real :class:`~meshd.service.Service`
installs -- no fake server, no socket: these parts are pure. What is checked:

* a decoder raises only what the server handles: ``msgspec.DecodeError`` (which
  includes ``ValidationError``) or ``RecursionError`` from the frame decoders, and
  ``InvalidParams``, ``NoSession`` (no ``session_id``, SPEC §3) or ``RecursionError``
  from ``decode_params``;
* whatever decodes, re-encodes and decodes to an equal value.

Run: ``python tests/hardening/fuzz_atheris.py -runs=100000`` (or ``-max_total_time=60``).
test_atheris.py runs it briefly when atheris is importable; atheris is not a test
dependency of the project.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import atheris  # type: ignore[import-untyped]

with atheris.instrument_imports(include=["meshd"]):
    import msgspec

    from meshd.app import wire
    from meshd.core.clock import ManualClock
    from meshd.core.settings import Settings
    from meshd.core.state import MeshState
    from meshd.paths import ProfilePaths
    from meshd.protocol.errors import InvalidParams, NoSession
    from meshd.protocol.jsonrpc import (
        Handler,
        batch_decoder,
        decode_params,
        recover_id,
        request_decoder,
    )
    from meshd.service import Service
    from meshd.store import Store


def real_handlers() -> list[tuple[str, Handler, Any]]:
    """The handlers a real Service installs (its store is never opened)."""
    root = Path(tempfile.mkdtemp(prefix="mesh-atheris-"))
    paths = ProfilePaths(
        profile="fuzz", socket=root / "s.sock", state=root, database=root / "db",
        lock=root / "lock", socket_record=root / "rec", config=root / "config.toml",
        log=root / "log",
    )  # fmt: skip
    state = MeshState(ManualClock(), Settings(), "fuzz")
    svc = Service(state, Store(paths.database), paths, domains=wire)
    types = {spec.name: spec.params for spec in svc.specs}
    return [(name, h, types[name]) for name, h in sorted(svc.handlers.items())]


HANDLERS = real_handlers()
ENCODE = msgspec.json.Encoder().encode


def check_frames(data: bytes) -> None:
    try:
        req = request_decoder.decode(data)
    except (msgspec.DecodeError, RecursionError):
        pass
    else:
        again = request_decoder.decode(ENCODE(req))
        assert (again.method, again.id) == (req.method, req.id), (data, req, again)
    try:
        batch = batch_decoder.decode(data)
    except (msgspec.DecodeError, RecursionError):
        pass
    else:
        items = batch_decoder.decode(ENCODE(batch))
        assert [bytes(r) for r in items] == [bytes(r) for r in batch], (data, batch, items)
    try:
        rid = recover_id(data)
    except RecursionError:
        return
    assert rid is None or (isinstance(rid, int | str) and not isinstance(rid, bool)), rid


def check_params(data: bytes) -> None:
    if not data:
        return
    name, h, ptype = HANDLERS[data[0] % len(HANDLERS)]
    raw = data[1:]
    try:
        params = decode_params(h, raw)
    except (InvalidParams, NoSession, RecursionError):
        return
    assert isinstance(params, ptype), (name, params)
    again = decode_params(h, ENCODE(params))
    assert again == params, (name, params, again)


def test_one_input(data: bytes) -> None:
    check_frames(data)
    check_params(data)


def seed_corpus() -> Path:
    """A corpus of well-formed frames and params for every method, and a token dictionary.

    msgspec is C, which atheris cannot instrument, so coverage says little: mutating
    good inputs finds more than bytes from nothing.
    """
    folder = Path(tempfile.mkdtemp(prefix="mesh-atheris-corpus-"))
    fields: set[str] = set()
    for i, (name, _h, ptype) in enumerate(HANDLERS):
        example = dict.fromkeys(ptype.__struct_fields__[:2], "s1")
        fields.update(ptype.__struct_fields__)
        body = ENCODE(example)
        (folder / f"p{i}").write_bytes(bytes([i]) + body)
        frame = b'{"jsonrpc":"2.0","id":%d,"method":"%s","params":%s}' % (i, name.encode(), body)
        (folder / f"f{i}").write_bytes(frame)
        (folder / f"b{i}").write_bytes(b"[" + frame + b"," + frame + b"]")
    tokens = [*fields, "jsonrpc", "2.0", "method", "params", "id", "null", "true", "1e400"]
    (folder.parent / (folder.name + ".dict")).write_text("".join(f'"{t}"\n' for t in tokens))
    return folder


def main() -> None:
    argv = list(sys.argv)
    if not any(not a.startswith("-") for a in argv[1:]):  # no corpus folder given
        corpus = seed_corpus()
        argv += [f"-dict={corpus}.dict", str(corpus)]
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
