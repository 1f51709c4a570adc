"""The background heartbeat thread of a blocking ``Session`` (SPEC §4, §10).

:class:`Heartbeats` owns the thread and its own :class:`~meshctl.Mesh` (so a slow
plain call never delays a heartbeat), heartbeats every interval, and backs off
while the daemon cannot be reached. What a heartbeat's reply means -- claim losses,
a daemon that restarted, a session that expired -- the session decides (its core).

Standard library only.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from meshctl import _log as log
from meshctl._session import BACKOFF_FIRST, BACKOFF_MAX
from meshd.protocol.errors import MeshError, MeshUnavailable, SessionExpired, UnknownSession

if TYPE_CHECKING:
    from meshctl._sync import Mesh
    from meshctl._sync_session import Session


class Heartbeats:
    """Heartbeat ``session`` from a daemon thread until :meth:`stop`."""

    def __init__(self, session: Session) -> None:
        self.session = session
        #: Heartbeats answered so far.
        self.count = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"meshctl-heartbeat-{self.session.session_id}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def wait(self, count: int, timeout: float) -> bool:
        """Block until :attr:`count` reaches ``count``; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self.count >= count, timeout)

    def _run(self) -> None:
        """Heartbeat every interval on a connection of our own; back off while it fails."""
        s = self.session
        mesh = s.mesh
        own = type(mesh)(
            mesh.profile, mesh.socket_path, autostart=mesh.autostart, timeout=mesh.timeout
        )
        # Not registered yet (failing open): poll often; the Mesh's own backoff decides
        # when a connection is really attempted, so polling costs nothing meanwhile.
        wait = s._core.interval if s._registered else BACKOFF_FIRST
        try:
            while not self._stop.wait(wait):
                if self._beat(own):
                    wait = s._core.interval if s._registered else BACKOFF_FIRST
                elif not s._registered:
                    wait = BACKOFF_FIRST
                else:
                    wait = min(max(wait * 2, BACKOFF_FIRST), BACKOFF_MAX)
        finally:
            own.close()

    def _beat(self, own: Mesh) -> bool:
        """One background heartbeat; False when the daemon could not be reached."""
        s = self.session
        with s._state:
            if s._ended:
                return True
            try:
                if not s._registered:
                    return s._register()
                result = own.call(
                    "session.heartbeat",
                    {"session_id": s.session_id, "lost_after": s._core.lost_after},
                )
                if result is not None:
                    s._heard(result)
                if own.daemon != s._core.daemon:
                    s._daemon_changed()
            except (SessionExpired, UnknownSession) as exc:
                try:
                    s._reregister(exc)
                except MeshError as again:
                    log.warning("Session Mesh: could not register again: %s", again)
                    return False
            except MeshUnavailable as exc:
                log.debug("heartbeat: %s", exc)
                return False
            except MeshError as exc:
                log.warning("Session Mesh heartbeat failed: %s", exc)
                return False
        with self._cond:
            self.count += 1
            self._cond.notify_all()
        return True
