"""Floor S: connect, send one request, print the reply. Standard library only.

``python bench/s_client.py [METHOD]`` talks to ``$MESH_SOCKET``; the whole
process is what ``meshctl`` commands are compared with.
"""

import json
import os
import socket
import sys

method = sys.argv[1] if len(sys.argv) > 1 else "session.list"
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(os.environ["MESH_SOCKET"])
sock.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method}).encode() + b"\n")
buf = b""
while not buf.endswith(b"\n"):
    data = sock.recv(65536)
    if not data:
        break
    buf += data
sys.stdout.write(buf.decode())
