"""What a waiting command shows while it waits: on stderr, on a terminal only.

``claim --wait``, ``run --wait``, ``resume``, ``job wait``, ``signal wait``,
``sessions ask``, ``handoff request`` and ``broadcast --collect`` block in one
request; a person watching would otherwise see a blank terminal. :func:`waiting`
draws one line on stderr -- what it waits for, who holds it and where it stands
in the queue (a ``detail`` callable, asked again every few seconds), and the
seconds left (or, for a wait without a limit, the seconds so far) -- and redraws
it in place every half second from a thread, then clears it: the command's own
outcome (``granted …``, or :func:`ran_out`) is the one line left when it ends.
The line is cut to the terminal's width, read again at every redraw (a resize):
a line one column too long wraps, and ``\r`` then returns to the start of its
last row only, leaving a row of junk at every redraw. The time left stays in view
(the middle is cut, with ``…``). Nothing is drawn when stderr is not a terminal
(scripts, cron, pipes, tests read clean output), and nothing is ever written to
stdout.

The detail of a claim wait (:func:`claim_detail`) is read on a connection of its
own (the command's is busy with the wait): ``claim.check`` for the holders and
``claim.list`` for the waiters ahead. When a wait runs out, the command says so
plainly (:func:`ran_out`), on a terminal or not.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from meshctl._sync import Mesh

_TICK = 0.5
_REFRESH = 2.0  # seconds between two readings of the detail


@contextlib.contextmanager
def waiting(
    what: str, seconds: float | None, detail: Callable[[], str] | None = None
) -> Iterator[None]:
    """Show ``what`` (and ``detail()``) with a countdown of ``seconds`` on a terminal's
    stderr while inside; ``seconds`` None counts up instead (a wait without a limit)."""
    err = sys.stderr
    if (seconds is not None and seconds <= 0) or not err.isatty():
        yield
        return
    from meshctl.cli._output import safe
    from meshctl.cli._terminal import columns

    what = safe(what)  # argv may hold undecodable bytes or control characters
    stop = threading.Event()
    start = time.monotonic()

    def draw() -> None:
        extra, read_at = "", -_REFRESH
        while not stop.is_set():
            now = time.monotonic()
            if detail is not None and now - read_at >= _REFRESH:
                extra, read_at = _read(detail, extra), now
            if seconds is None:
                clock = f"{round(now - start)} s so far"
            else:
                clock = f"{max(0, round(start + seconds - now))} s left"
            err.write("\r\x1b[2K" + fit(f"meshctl: {what}{extra}", clock, columns(err)))
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
        if isinstance(detail, Detail):
            detail.close()


def fit(head: str, clock: str, columns: int) -> str:
    """``head — clock (Ctrl-C to stop)`` in at most ``columns - 1`` cells (the last
    column is left free: writing there makes some terminals wrap at once).

    What gives way first: the Ctrl-C hint, then the end of ``head`` (cut with ``…``);
    the clock stays, as long as there is room for anything at all."""
    from meshctl.cli._terminal import cut, width

    room = max(columns - 1, 1)
    tail = f" — {clock} (Ctrl-C to stop)"
    if width(head) + width(tail) <= room:
        return head + tail
    tail = f" — {clock}"
    if width(tail) + 2 > room:
        return cut(head + tail, room)
    return cut(head, room - width(tail)) + tail


def _read(detail: Callable[[], str], last: str) -> str:
    """``detail()`` made safe, as ``; …``; the last reading when this one fails."""
    from meshctl.cli._output import safe

    try:
        text = detail()
    except Exception:  # the display must never break the wait it shows
        return last
    return f"; {safe(text)}" if text else ""


def ran_out(seconds: float, what: str, took: Any = None) -> None:
    """Say plainly, on stderr, that a wait of ``seconds`` ended without ``what``.

    ``took``: how long the daemon says it waited. The daemon caps every wait at
    ``max_query_timeout`` (SPEC §2), so a wait asked for longer ran out sooner: the
    note says the time it ran, and the cap that ended it.
    """
    from meshctl.cli._output import note

    if isinstance(took, int | float) and took < seconds - 0.5:
        note(
            f"the wait ran out after {round(took, 1):g} s, the longest one wait runs here "
            f"(max_query_timeout; {seconds:g} s were asked); {what}"
        )
        return
    note(f"the wait ran out after {seconds:g} s; {what}")


# --- who holds what, and the queue ----------------------------------------------------------


class Detail:
    """A ``detail`` read on a second connection to ``mesh``'s daemon (``mesh`` itself
    is busy with the wait): opened at the first reading, closed by :func:`waiting`."""

    def __init__(self, mesh: Mesh, read: Callable[[Mesh], str]) -> None:
        self._mesh = mesh
        self._read = read
        self._side: Mesh | None = None

    def __call__(self) -> str:
        if self._side is None:
            from meshctl._sync import Mesh

            self._side = Mesh(self._mesh.profile, self._mesh.socket_path, autostart=False,
                              timeout=2.0)  # fmt: skip
        return self._read(self._side)

    def close(self) -> None:
        if self._side is not None:
            self._side.close()


def claim_detail(mesh: Mesh, session_id: str, resources: Sequence[str] | None) -> Detail:
    """Who holds ``resources``, and how many waiters are ahead of ``session_id`` in the
    queue. ``resources`` None: whatever ``session_id`` is queued for (``resume``'s set)."""

    def read(side: Mesh) -> str:
        waiters = side.call("claim.list", {}).get("waiting") or []
        wanted = list(resources) if resources is not None else _queued_for(waiters, session_id)
        if not wanted:
            return ""
        probe = side.call("claim.check", {"session_id": session_id, "resources": wanted})
        return describe_wait(probe.get("claims") or [], waiters, session_id, wanted)

    return Detail(mesh, read)


def _queued_for(waiters: Sequence[dict[str, Any]], session_id: str) -> list[str]:
    return [str(r) for w in waiters if w.get("session_id") == session_id
            for r in w.get("resources") or []]  # fmt: skip


def describe_wait(
    holders: Sequence[dict[str, Any]],
    waiters: Sequence[dict[str, Any]],
    session_id: str,
    resources: Sequence[str],
) -> str:
    """``A holds res:db since 14:02 — why (+1 more); 2 ahead in the queue``, or ``free now``."""
    from meshctl import _claims

    parts = []
    if holders:
        first = _claims.holder_line(holders[0])
        parts.append(first + (f" (+{len(holders) - 1} more)" if len(holders) > 1 else ""))
    ahead = _ahead(waiters, session_id, resources)
    if ahead:
        parts.append(f"{ahead} ahead in the queue")
    elif holders:
        parts.append("next in the queue")
    return "; ".join(parts) or "free now"


def _ahead(waiters: Sequence[dict[str, Any]], session_id: str, resources: Sequence[str]) -> int:
    """Waiters queued before ``session_id`` (all of them, until it is queued) on keys
    that overlap ``resources``."""
    mine = [str(r) for r in resources]
    ahead = 0
    for w in waiters:  # the daemon lists them in queue order
        if w.get("session_id") == session_id:
            break
        if any(_overlap(str(r), m) for r in w.get("resources") or [] for m in mine):
            ahead += 1
    return ahead


def _overlap(a: str, b: str) -> bool:
    """Whether two keys touch the same thing (path keys: one holds the other)."""
    if a == b:
        return True
    kinds = ("file:", "repo:")
    if a.startswith(kinds) and b.startswith(kinds):
        pa, pb = a.split(":", 1)[1].rstrip("/"), b.split(":", 1)[1].rstrip("/")
        return pa == pb or pa.startswith(pb + "/") or pb.startswith(pa + "/") or not pa or not pb
    return False


def session_detail(mesh: Mesh, session_id: str) -> Detail:
    """What session ``session_id`` is doing (status and task)."""

    def read(side: Mesh) -> str:
        got = side.call("session.get", {"session_id": session_id})
        return f"{session_id} is {got.get('status') or 'idle'}: {got.get('task') or 'no task'}"

    return Detail(mesh, read)


def others_detail(mesh: Mesh, session_id: str) -> Detail:
    """The other live sessions (who a broadcast asks)."""

    def read(side: Mesh) -> str:
        listed = side.call("session.list", {"fresh": True}).get("sessions") or []
        others = [str(s.get("session_id")) for s in listed if s.get("session_id") != session_id]
        shown = ", ".join(others[:3]) + (f" +{len(others) - 3}" if len(others) > 3 else "")
        return f"asked {len(others)}: {shown}" if others else "no other live session"

    return Detail(mesh, read)


def job_detail(mesh: Mesh, name: str) -> Detail:
    """Who runs job ``name``, and since when."""
    from meshctl.cli import _time

    def read(side: Mesh) -> str:
        for job in side.call("job.list", {}).get("jobs") or []:
            if job.get("name") == name and (run := job.get("running")):
                return f"run by {run.get('session_id')}, started {_time.ago(run.get('at'))}"
        return ""

    return Detail(mesh, read)
