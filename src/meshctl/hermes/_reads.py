"""What a Hermes session reads, on the board (SPEC §7 ``board touch PATH… --read``).

A changed file is told to every other live session that claims, watches or *read*
an overlapping path. Hermes's model reads files with ``read_file`` (and greps one
with ``search_files``); unless those reads reach the board, a chat that read
``src/auth.py`` is never told that another session then changed it. So after each
successful read the plugin records the path, never the contents, for that chat.

A read must stay cheap for the agent, and a ``board.touch`` is a durable write on
the daemon. So:

- **Once per (session, path)**: a path the session already recorded is not sent
  again, except after :data:`REFRESH` seconds, so the daemon's 12-hour freshness of
  a read (``meshd.core.work.marks.READ_FRESH``) follows the agent's latest reads.
  Per session at most :data:`MAX_PATHS` are remembered (oldest forgotten first: at
  worst a path is sent twice), and nothing once the session ends.
- **Off the tool's path**: the hook only notes the path; the process's sender
  (:mod:`._sender`) sends what was noted, a session's paths in one ``board.touch``.
- **Failing open**: a read is noted whatever the daemon's state (the hook does not
  ask it); a send that finds the daemon unreachable keeps the paths and the sender
  tries again every :data:`._sender.RETRY` seconds, so a read made while the daemon
  was away is recorded once it is back. Beyond :data:`MAX_PENDING` waiting paths a
  read is not recorded, and the next read of it, daemon back, records it. A
  ``board.touch`` the daemon refuses (one path it takes for no key refuses the whole
  call) is sent again one path a call, so only
  that path goes unrecorded. A session the daemon no longer knows registers
  again at its next hook, and then starts with nothing remembered (its marks went
  with it).
- **Not recorded**: group chats (they are told nothing: SPEC §6); a ``search_files``
  over a folder (the folder would draw a notice for every change under it: only a
  search naming one file is a read of it). Only files are recorded, so never the
  home folder a gateway chat works in.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from ._common import READ_TOOLS, Host, Tracked, absolute, reportable
from ._sender import Outbox, Sender

#: Seconds after which a read of a path already recorded is recorded again.
REFRESH = 3600.0
#: Paths remembered per session (oldest forgotten first).
MAX_PATHS = 2048
#: Paths waiting to be sent, over every session (beyond: the read is not recorded).
MAX_PENDING = 4096
#: The daemon's limits on one ``board.touch``: paths per call, characters per path.
MAX_BATCH = 1000
MAX_PATH = 4096


def read_path(tool_name: str, args: Any, base: str | None = None) -> str | None:
    """The absolute path a file-reading tool call names (None for other tools).

    Relative paths are resolved against the working folder, as written paths are
    (:func:`._common.written_paths`). String work only: whether a ``search_files``
    path is one file is asked (:func:`is_read`) only of a path not recorded lately.
    """
    key = READ_TOOLS.get(tool_name)
    if key is None or not isinstance(args, Mapping):
        return None
    raw = args.get(key)
    if not isinstance(raw, str) or not raw:
        return None
    full = absolute(raw, base)
    return full if len(full) <= MAX_PATH else None


def is_read(tool_name: str, path: str) -> bool:
    """Whether the call read ``path`` as a file: a ``read_file`` that succeeded did; a
    ``search_files`` did only when its path is one file (a folder, the home folder
    above all, would draw a notice for every change under it)."""
    return tool_name != "search_files" or os.path.isfile(path)


class Reads(Outbox):
    """Records a process's reads on the board: noted by hooks, sent by the sender."""

    def __init__(self, host: Host, sender: Sender) -> None:
        self.host = host
        self.sender = sender
        self._lock = threading.Lock()
        self._pending: dict[str, list[str]] = {}  # session id -> paths to send, in order
        self._count = 0
        #: board.touch calls sent (for tests and the bench; never read by the plugin)
        self.sent = 0

    def note(self, t: Tracked, tool_name: str, args: Any) -> bool:
        """After a successful read: note its path unless recorded lately (True: noted)."""
        path = read_path(tool_name, args)
        if path is None:
            return False
        now = time.monotonic()
        seen = t.reads
        at = seen.get(path)
        if at is not None and now - at < REFRESH:
            return False  # the common case, a file read again: one dict lookup
        if self._count >= MAX_PENDING or not is_read(tool_name, path):
            return False
        with self._lock:
            seen.pop(path, None)  # re-inserted last: dicts keep order, oldest first
            seen[path] = now
            while len(seen) > MAX_PATHS:
                del seen[next(iter(seen))]
            first = not self._pending
            self._pending.setdefault(t.session_id, []).append(path)
            self._count += 1
        if first:  # else the flush already due takes it
            self.sender.wake()
        return True

    def flush(self, link: Any) -> bool:
        """Send what was noted: one ``board.touch`` per session (per 1,000 paths).
        True when some stay for the next try (the daemon was away)."""
        with self._lock:
            pending, self._pending, self._count = self._pending, {}, 0
        kept = False
        for sid, paths in pending.items():
            for i in range(0, len(paths), MAX_BATCH):
                kept = self._send(link, sid, paths[i : i + MAX_BATCH]) or kept
        return kept

    def flush_session(self, t: Tracked, link: Any) -> None:
        """An ending session's reads are not recorded (its marks go with it)."""
        with self._lock:
            self._count -= len(self._pending.pop(t.session_id, []))

    def _send(self, link: Any, sid: str, paths: list[str]) -> bool:
        """Send one batch; True when it stays pending (the daemon is away)."""
        t = self.host.sessions.get(sid)
        if t is None or not t.registered:
            return False  # ended meanwhile, or to register again (it remembers nothing)
        gone: list[bool] = []
        params = {"session_id": sid, "paths": [reportable(p) for p in paths], "read": True}
        self.sent += 1
        result = link.call("board.touch", params, forgotten=lambda: gone.append(True))
        if isinstance(result, dict):
            return False
        if gone:
            self.host.forget(sid)
        if link.down and not gone:  # the daemon is away: tried again, while there is room
            with self._lock:
                if self._count + len(paths) <= MAX_PENDING:
                    self._pending.setdefault(sid, [])[:0] = paths
                    self._count += len(paths)
                    return True
        if gone or link.down:  # not recorded: the next read of these tries again
            with self._lock:
                for path in paths:
                    t.reads.pop(path, None)
        elif len(paths) > 1:  # refused whole for one path it takes for no key (a tab in
            for path in paths:  # a name): each alone, so only that one goes unrecorded
                self._send(link, sid, [path])
        return False
