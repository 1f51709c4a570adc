"""What a waiting command shows while it waits: on stderr, on a terminal only.

``claim --wait``, ``run --wait``, ``sessions ask``, ``job wait`` … block in one
request; a person watching would otherwise see a blank terminal. :func:`waiting`
draws one line on stderr — what it waits for, and the seconds left — and redraws
it every half second from a thread, then clears it. Nothing is drawn when stderr
is not a terminal (scripts, cron, pipes, tests read clean output), and nothing is
ever written to stdout.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator

_TICK = 0.5


@contextlib.contextmanager
def waiting(what: str, seconds: float) -> Iterator[None]:
    """Show ``what`` and a countdown of ``seconds`` on a terminal's stderr while inside."""
    err = sys.stderr
    if seconds <= 0 or not err.isatty():
        yield
        return
    from meshctl.cli._output import safe

    what = safe(what)  # argv may hold undecodable bytes or control characters
    stop = threading.Event()
    deadline = time.monotonic() + seconds

    def draw() -> None:
        while not stop.is_set():
            left = max(0, round(deadline - time.monotonic()))
            err.write(f"\r\x1b[2Kmeshctl: {what} — {left} s left (Ctrl-C to stop)")
            err.flush()
            stop.wait(_TICK)

    painter = threading.Thread(target=draw, name="meshctl-waiting", daemon=True)
    painter.start()
    try:
        yield
    finally:
        stop.set()
        painter.join()
        err.write("\r\x1b[2K")
        err.flush()
