"""systemd integration with the standard library only (``sd_notify(3)``, ``sd_listen_fds(3)``).

``notify`` sends one datagram to ``$NOTIFY_SOCKET`` (a leading ``@`` means the
abstract namespace) and does nothing outside systemd. ``listen_fds`` adopts the
sockets systemd passed when ``LISTEN_PID`` is us, checking each is a Unix stream
socket, and unsets the variables so children do not inherit them.
"""

from __future__ import annotations

import os
import socket

SD_LISTEN_FDS_START = 3


def notify(message: str) -> bool:
    """Send ``message`` (e.g. ``READY=1``); False when not under systemd."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(addr)
            s.sendall(message.encode())
    except OSError:
        return False
    return True


def watchdog_interval() -> float | None:
    """Half of ``WATCHDOG_USEC`` in seconds, if systemd asked for pings."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 2_000_000


def listen_fds() -> list[socket.socket]:
    """Sockets passed by socket activation (empty when there are none)."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return []
    count = int(os.environ.get("LISTEN_FDS", "0"))
    for var in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(var, None)
    out = []
    for fd in range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + count):
        sock = socket.socket(fileno=fd)
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
            raise OSError(f"fd {fd} from systemd is not a Unix stream socket")
        sock.set_inheritable(False)
        out.append(sock)
    return out
