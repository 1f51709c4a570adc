"""One thread per process sends what the hooks noted, off the hooks' path.

A hook runs inside Hermes's agent loop, on every tool call, and Hermes waits for
it. Only what must be answered before the tool runs stays on the hook's path (the
claim check a write's warning needs; the inbox a tool result carries is pushed to the
process, :mod:`._view`); everything the daemon only has to *know* is noted by the
hook and sent by this thread:

- status changes (``session.heartbeat`` with fields: :mod:`._status`),
- files read (``board.touch --read``: :mod:`._reads`),
- files written (``board.changed``: :mod:`._writes`),
- the items a hook showed the model (``message.ack``: :class:`._view.Acks`),
- and every :attr:`Host.interval` seconds a bare heartbeat for each live session
  of the process (which does not move ``last_activity``: an idle chat shows as
  idle, however long it stays open).

Each kind is an :class:`Outbox`; the sender wakes when one that was empty is given
something (a note into a full one is taken by the flush already due), waits
:data:`LINGER` so a burst of hooks goes out as one call per session, and sends on a
link of its own (a hung daemon's timeout on a hook's call, which
closes that connection, never costs it a heartbeat; a durable ``board.changed``
never queues in front of a hook's call). What an outbox keeps for later (a write
noted while the daemon was away) is tried again every :data:`RETRY` seconds.

:meth:`Sender.flush` sends everything noted so far on the calling thread and
returns when it is sent: the end of a session uses it (the daemon takes nothing
for a session after its end), and so can anyone who must read back what the
plugin reported (tests). One lock orders the sends, so a status noted later is
never sent before one noted earlier.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ._common import Host, Tracked

log = logging.getLogger("meshd.hermes")

#: Seconds the sender waits after a wake before it sends (a burst goes as one call).
LINGER = 0.02
#: Seconds between tries while an outbox keeps something (the link's back-off applies).
RETRY = 1.0


class Outbox:
    """One kind of report the hooks note and the sender sends."""

    def flush(self, link: Any) -> bool:
        """Send what waits on ``link``; True when something stays for a later try."""
        raise NotImplementedError

    def flush_session(self, t: Tracked, link: Any) -> None:
        """The session is about to end: send (or drop) its part now; what the daemon
        still takes after the end may be kept for a later try."""
        raise NotImplementedError


class Sender:
    """The process's one sending thread, and its outboxes (see the module's doc)."""

    def __init__(self, host: Host, new_link: Callable[[], Any]) -> None:
        self.host = host
        self._new_link = new_link
        self._link: Any = None
        self.boxes: list[Outbox] = []
        self._send = threading.Lock()  # one flush at a time: sends stay in order
        self._start_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._kept = False
        self._beat_at = 0.0

    def add(self, box: Outbox) -> None:
        self.boxes.append(box)

    @property
    def link(self) -> Any:
        """The sender's own link to the daemon (made at its first use)."""
        if self._link is None:
            self._link = self._new_link()
        return self._link

    def start(self) -> None:
        """Start the thread unless it runs (or was stopped)."""
        if self._thread is not None and self._thread.is_alive():
            return
        with self._start_lock:
            if self._stop.is_set() or (self._thread is not None and self._thread.is_alive()):
                return
            self._beat_at = time.monotonic() + self.host.interval
            self._thread = threading.Thread(target=self._run, name="meshd-sender", daemon=True)
            self._thread.start()

    def wake(self) -> None:
        """Something was noted: send it soon."""
        self.start()
        self._wake.set()

    def stop(self) -> None:
        """No more sending by the thread (:meth:`flush` still sends, on the caller's)."""
        self._stop.set()
        self._wake.set()

    def close(self, wait: float = 5.0) -> None:
        """Stop the thread, wait up to ``wait`` seconds for it, close the link."""
        self.stop()
        thread = self._thread
        if thread is not None:
            thread.join(wait)
        with self._send:
            if self._link is not None:
                self._link.close()
                self._link = None

    def flush(self) -> None:
        """Send everything noted so far, on this thread; returns when it is sent (or
        kept for a later try: the daemon is away)."""
        with self._send:
            link = self.link
            kept = False
            for box in self.boxes:
                kept = box.flush(link) or kept
            self._kept = kept

    def flush_session(self, t: Tracked) -> None:
        """Send (or drop) what waits for ``t`` now: it is about to end."""
        with self._send:
            link = self.link
            for box in self.boxes:
                box.flush_session(t, link)

    def beat(self) -> None:
        """A bare heartbeat for every registered session of the process; a session not
        registered (the daemon was away) is registered again."""
        host = self.host
        with self._send:
            link = self.link
            for t in list(host.sessions.values()):
                if t.registered:
                    link.call(
                        "session.heartbeat",
                        {"session_id": t.session_id},
                        forgotten=lambda t=t: host.forget(t.session_id),
                    )
                elif not host.link.disabled:
                    host.register(t)

    def _run(self) -> None:
        stop, wake = self._stop, self._wake
        while not stop.is_set():
            due = self._beat_at - time.monotonic()
            if wake.wait(max(0.0, min(due, RETRY) if self._kept else due)):
                stop.wait(LINGER)  # a burst of hooks: one call per session
            wake.clear()
            if stop.is_set():
                break
            try:
                self.flush()
                if time.monotonic() >= self._beat_at:
                    self._beat_at = time.monotonic() + self.host.interval
                    self.beat()
            except Exception:  # never let one bad send end the thread
                log.debug("meshd: sending failed", exc_info=True)
