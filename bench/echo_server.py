"""Floor E (and D): the least an anyio + msgspec newline-JSON server can do.

``python -m bench.echo_server SOCKET [--rows N --interval S --db PATH]``

Each line is decoded as a JSON-RPC request and answered with its id and a small
result, one frame per ``send``, exactly as meshd's server does, minus the work.
Method ``fanout`` first writes one event line to every other connection: the
floor for a broadcast.
The ask's floor (E3, a relay through a third process): ``query.respond`` makes the
connection the responder for ``session_id``; ``query.ask`` pushes a ``query`` event
to the responder of ``to`` and is answered when ``query.answer`` comes back with
that query's id (the asker's reply written first, then the answer's own). The same
frames as meshd's ask, so ``bench/responder.py`` answers both; none of the mesh's
work (no sessions, budgets, chains, timeouts).
With ``--rows N`` a worker thread also writes N 300-byte rows to SQLite every
``--interval`` seconds: the floor for the event-loop stall during a snapshot.
"""

from __future__ import annotations

import resource
import sqlite3
import sys
import threading
import time

import anyio
import msgspec
from anyio.streams.buffered import BufferedByteReceiveStream


class Req(msgspec.Struct):
    jsonrpc: str
    method: str
    id: int | str | None = None
    params: msgspec.Raw = msgspec.Raw(b"null")


class Row(msgspec.Struct, gc=False):
    session_id: str
    task: str
    n: int


class AskParams(msgspec.Struct):
    session_id: str = ""
    to: str = ""
    question: str = ""
    query_id: int = 0
    text: str = ""


decode = msgspec.json.Decoder(Req).decode
decode_ask = msgspec.json.Decoder(AskParams).decode
encode = msgspec.json.Encoder().encode


STREAMS: set[anyio.abc.ByteStream] = set()
EVENT = encode({"jsonrpc": "2.0", "method": "event", "params": {"kind": "message"}}) + b"\n"
RESPONDERS: dict[str, anyio.abc.ByteStream] = {}
ASKS: dict[int, tuple[anyio.abc.ByteStream, int | str | None]] = {}
"""The relay's open asks: query id -> the asker's stream and request id."""


async def relay(stream: anyio.abc.ByteStream, req: Req) -> bool:
    """The ask floor's methods; True when ``req`` is answered later (an ask)."""
    p = decode_ask(req.params)
    if req.method == "query.respond":
        RESPONDERS[p.session_id] = stream
    elif req.method == "query.ask":
        qid = len(ASKS) + 1
        while qid in ASKS:
            qid += 1
        if p.to not in RESPONDERS:  # not subscribed yet: a plain reply, nobody answered
            return False
        ASKS[qid] = (stream, req.id)
        event = {"kind": "query", "id": qid, "session_id": p.to, "from": p.session_id,
                 "text": p.question}  # fmt: skip
        await RESPONDERS[p.to].send(
            encode({"jsonrpc": "2.0", "method": "event", "params": event}) + b"\n"
        )
        return True
    elif req.method == "query.answer":
        asker, rid = ASKS.pop(p.query_id)
        result = {"answer": p.text, "answered_by": "session", "query_id": p.query_id}
        await asker.send(encode({"jsonrpc": "2.0", "id": rid, "result": result}) + b"\n")
    return False


async def handle(stream: anyio.abc.ByteStream) -> None:
    reader = BufferedByteReceiveStream(stream)
    STREAMS.add(stream)
    async with stream:
        try:
            while True:
                req = decode(await reader.receive_until(b"\n", 1 << 20))
                if req.method.startswith("query.") and await relay(stream, req):
                    continue
                if req.method == "fanout":  # the broadcast floor: one line to everyone else
                    for other in list(STREAMS - {stream}):
                        await other.send(EVENT)
                reply = {"jsonrpc": "2.0", "id": req.id, "result": {"ok": True}}
                await stream.send(encode(reply) + b"\n")
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
            return
        finally:
            STREAMS.discard(stream)


def writer(db_path: str, rows: int, interval: float) -> None:
    """Snapshot floor: rewrite ``rows`` encoded rows in one transaction every interval."""
    db = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE IF NOT EXISTS t (id TEXT PRIMARY KEY, record BLOB)")
    gen = 0
    while True:
        time.sleep(interval)
        gen += 1
        db.execute("BEGIN IMMEDIATE")
        for i in range(rows):
            rec = encode(Row(f"s{i}", "x" * 200 + str(gen), gen))
            db.execute("INSERT OR REPLACE INTO t VALUES (?, ?)", (f"s{i}", rec))
        db.execute("COMMIT")


async def main(path: str) -> None:
    listener = await anyio.create_unix_listener(path)
    await listener.serve(handle)


if __name__ == "__main__":
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    args = sys.argv[1:]
    if "--rows" in args:
        opts = dict(zip(args[1::2], args[2::2], strict=False))
        t = threading.Thread(
            target=writer,
            args=(opts["--db"], int(opts["--rows"]), float(opts["--interval"])),
            daemon=True,
        )
        t.start()
    anyio.run(main, args[0])
