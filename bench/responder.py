"""A live responder for the ask benchmark: ``python -m bench.responder SOCKET SESSION``.

Subscribes to SESSION's events, becomes its live responder (``query.respond``),
and answers every ``query`` event at once with ``query.answer``: what an agent's
plugin does, minus the agent. Standard library only; stopped with SIGTERM.
"""

from __future__ import annotations

import json
import socket
import sys


def main(path: str, sid: str) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    rid = 0

    def send(method: str, params: dict[str, object]) -> None:
        nonlocal rid
        rid += 1
        frame = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        sock.sendall(json.dumps(frame, separators=(",", ":")).encode() + b"\n")

    send("events.subscribe", {"session_id": sid})
    send("query.respond", {"session_id": sid})
    buf = b""
    while data := sock.recv(65536):
        buf += data
        *lines, buf = buf.split(b"\n")
        for line in lines:
            msg = json.loads(line)
            if "error" in msg:
                print(f"responder: {msg['error']}", file=sys.stderr, flush=True)
            params = msg.get("params") or {}
            if msg.get("method") == "event" and params.get("kind") == "query":
                send("query.answer", {"session_id": sid, "query_id": params["id"], "text": "ok"})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
