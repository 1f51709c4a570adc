"""The live responder: one connection answers questions for every session of the
process (SPEC §6), and keeps the pushed inbox view (:mod:`._view`).

A query to a session whose model is at work is queued for the model (it sees it
after its next tool call and may answer with ``mesh_reply`` before the asker's
timeout; if not, the daemon's status responder answers). A query to a session
waiting for its user is answered at once from what the plugin knows, and queued
for the model's next turn. A session whose model has no tool to answer with gets
its status as the answer, at once.

The same connection subscribes to each session's events (``events.subscribe``) and
reads its inbox once right after (on every connection, and again whenever the
session was registered again): the :class:`~._view.View` the hooks read instead of
asking the daemon. A lost connection takes every session's view out of sync at
once, before the new one is opened. A reply that does not come in time loses
nothing (the connection stays open): the session it was for is followed again on a
later pass, and the other sessions' views stay as they are.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from . import _client
from ._common import Tracked
from ._view import View

#: Questions remembered for a late mesh_reply (query id -> asker), newest kept.
MAX_ASKERS = 256
#: Seconds before following again after a reply that timed out, doubling while the
#: daemon keeps not answering (hung, stopped): a retry is one more request it reads.
RETRY_FIRST = 0.5
RETRY_MAX = 10.0


class Responder:
    """The responder thread and what it remembers of the questions it passed on."""

    def __init__(
        self,
        sessions: dict[str, Tracked],
        profile: str,
        socket: str | None,
        view: View | None = None,
        forget: Any = None,
    ) -> None:
        self.sessions = sessions
        self.profile = profile
        self.socket = socket
        self.view = view if view is not None else View(sessions)
        self._forget = forget  # the daemon does not know a session: register it again
        #: query id -> asker, for questions handed to the model (mesh_reply needs it)
        self.askers: dict[int, str] = {}
        #: sessions whose questions this process's responder connection receives now
        self.responding: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._respond, name="meshd-responder", daemon=True
                )
                self._thread.start()

    def stop(self, wait: float = 0.0) -> None:
        """Stop answering; wait up to ``wait`` seconds for the thread (its connection
        is closed when it ends)."""
        self._stop.set()
        thread = self._thread
        if wait and thread is not None:
            thread.join(wait)

    def _respond(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                conn = _client.listener(self.profile, self.socket)
            except Exception:
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            backoff = 0.5
            try:
                self._serve(conn)
            except Exception:
                self.view.lost()  # events may be missed from now on: the hooks ask
                self._stop.wait(backoff)
            finally:
                self.view.lost()
                conn.close()

    def _serve(self, conn: Any) -> None:
        serving: dict[str, int] = {}  # session -> the registration it is served for
        self.responding = set()  # a new connection: responds for none yet
        retry_at, pause = 0.0, 0.0  # after a reply that timed out: when to follow again
        while not self._stop.is_set():
            if time.monotonic() >= retry_at:
                for t in list(self.sessions.values()):
                    epoch = t.epoch
                    if t.registered and not t.group and serving.get(t.session_id) != epoch:
                        serving[t.session_id] = epoch  # tried once per registration
                        if self._follow(conn, t, epoch):
                            pause = 0.0
                            continue
                        del serving[t.session_id]  # timed out: followed again later, and
                        pause = min(max(pause * 2, RETRY_FIRST), RETRY_MAX)  # what came
                        retry_at = time.monotonic() + pause  # meanwhile is read first
                        break
            for sid in [s for s in serving if s not in self.sessions]:
                del serving[sid]
            self.responding.intersection_update(serving)
            event = conn.next_event(0.25)
            while isinstance(event, dict):
                if event.get("kind") == "query":
                    self.on_query(conn, event)
                else:
                    self.view.push(event)
                event = conn.next_event(0) if conn.events else None

    def _follow(self, conn: Any, t: Tracked, epoch: int) -> bool:
        """Answer for ``t``, subscribe to its events, then read its inbox once: its view
        is in sync from then on (until the connection is lost or ``t`` registers again).
        A daemon that no longer knows ``t`` has it registered again (a new epoch).

        False when a reply did not come in time: the connection is still open (a
        timeout gives up one reply, :meth:`meshctl._blocking.Connection.exchange`) and
        what it was pushed for the other sessions is good, so only ``t`` is followed
        again later (``query.respond`` and ``events.subscribe`` are sets on the
        daemon: asking twice is asking once). Any other failure of the connection is
        raised: a new one."""
        sid = t.session_id
        self.responding.discard(sid)  # until it is served again in full
        try:
            conn.call("query.respond", {"session_id": sid})
            conn.call("events.subscribe", {"session_id": sid})
            inbox = conn.call("message.inbox", {"session_id": sid, "peek": True})
        except Exception as exc:
            if getattr(exc, "data_code", "") in ("UNKNOWN_SESSION", "SESSION_EXPIRED"):
                if self._forget is not None:
                    self._forget(sid, epoch)
                return True
            if isinstance(exc, _client.library().MeshTimeout) and not conn.closed:
                return False
            raise  # the connection failed: a new one
        items = [dict(i) for i in inbox.get("items") or [] if isinstance(i, Mapping)]
        self.responding.add(sid)
        self.view.resync(t, epoch, items)
        return True

    def on_query(self, conn: Any, event: Mapping[str, Any]) -> None:
        t = self.sessions.get(str(event.get("session_id") or event.get("to") or ""))
        if t is None:
            return
        query = {"id": event.get("id"), "kind": "query", "from": event.get("from", ""),
                 "text": event.get("text", "")}  # fmt: skip
        doing = f": {t.task}" if t.task else ""
        if t.answers is False:  # its model has no tool to answer with: the status, now
            self._status(conn, t, query, f"{t.session_id} is {t.status}{doing}. Its model "
                         "runs without the mesh tools, so it cannot answer questions.")  # fmt: skip
            return
        if isinstance(query["id"], int):
            self.askers[query["id"]] = str(query["from"])
            while len(self.askers) > MAX_ASKERS:  # oldest first (dicts keep order)
                del self.askers[next(iter(self.askers))]
        t.questions.append(query)
        if t.status in ("thinking", "tool-running"):
            return  # the model may answer mid-turn; else the status responder does
        self._status(conn, t, query, f"{t.session_id} is {t.status}{doing}. Its model is not "
                     "running now; your question was passed on to it, and an answer it gives "
                     "later will reach your inbox.")  # fmt: skip

    def _status(self, conn: Any, t: Tracked, query: Mapping[str, Any], text: str) -> None:
        """Answer ``query`` at once with the session's status, marked as such (a daemon
        older than ``by`` refuses the field: then unmarked, as before)."""
        params = {"session_id": t.session_id, "query_id": query["id"], "text": text}
        try:
            conn.call("query.answer", {**params, "by": "status"})
        except Exception as exc:
            if getattr(exc, "data", {}).get("code") != "INVALID_PARAMS":
                return
            try:
                conn.call("query.answer", params)
            except Exception:
                return
