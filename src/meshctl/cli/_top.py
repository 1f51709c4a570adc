"""The view behind ``meshctl top`` (imported only when top runs): what every agent
session is doing, live, on one screen.

Fed by the daemon, not by polling: a second connection calls ``mesh.watch`` and
receives a ``mesh.changed`` event (at most four a second) whenever something
durable changes; only then does top read the state again (``session.list``,
``claim.list``, ``job.list``, ``handoff.list``, ``board.changes``). Between
events it only redraws, so ages keep counting.

On a terminal it is a full-screen view (the standard library's ``curses``; it
works in tmux and over ssh): ``q`` quits, ``/`` filters (a substring of a session
id, task, resource or path; empty clears it), ``j``/``k`` or the arrows move,
``Enter`` opens the selected session, ``Esc`` goes back. When stdout is not a
terminal, or ``TERM`` is ``dumb``, it prints the whole view again each time
something changes (``--once``: one view, then exit) — for logs and pipes.

Everything another session wrote (tasks, reasons, summaries) is shown with its
control characters escaped, as everywhere in meshctl.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import click

from meshctl import _claims
from meshctl.cli import _output, _time
from meshctl.cli._context import State

Doc = Mapping[str, Any]


@dataclass
class View:
    """What top shows: the daemon's answers at one moment."""

    profile: str = ""
    sessions: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    waiting: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    handoffs: list[dict[str, Any]] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    at: float = 0.0


def _call(state: State, method: str, params: dict[str, Any] | None = None) -> Any:
    """One read; a method an older daemon lacks reads as nothing."""
    from meshd.protocol.errors import MethodNotFound

    try:
        return state.call(method, params)
    except MethodNotFound:
        return {}


def fetch(state: State) -> View:
    listed = _call(state, "session.list")
    claims = _call(state, "claim.list")
    return View(
        profile=str(listed.get("profile") or state.profile),
        sessions=list(listed.get("sessions") or []),
        claims=list(claims.get("claims") or []),
        waiting=list(claims.get("waiting") or []),
        jobs=list(_call(state, "job.list", {}).get("jobs") or []),
        # handoff.list answers newest first: the newest five, shown newest last
        handoffs=list(
            reversed(_call(state, "handoff.list", {"all": True, "limit": 5}).get("handoffs") or [])
        ),
        changes=list(_call(state, "board.changes", {"limit": 5}).get("entries") or []),
        at=time.time(),
    )


def _age(at: Any, now: float) -> str:
    ts = _time.epoch(at)
    return "?" if ts is None else _time.age(now - ts)


def _matches(text: str, needle: str) -> bool:
    return not needle or needle.lower() in text.lower()


def session_line(s: Doc, *, hosts: bool = False, width: int = 10_000) -> str:
    """One session: id, status, idle time, task, where; stale and orphaned marked.

    ``hosts``: name each session's host (when the sessions span several). ``width``:
    the cells the line may take; the task and the folder give way (cut with ``…``),
    never the marks, which say the most in the fewest cells."""
    from meshctl.cli._terminal import cut
    from meshctl.cli._terminal import width as cells

    status = s.get("status") or "idle"
    where = _output.tilde(s.get("cwd")) or ""
    if s.get("branch"):
        where += f" ({s['branch']})"
    host = f" @{s['host']}" if hosts and s.get("host") else ""
    rank = f" rank {s['rank']}" if s.get("rank") else ""
    idle = _time.age(float(s.get("idle_s", s.get("age_s")) or 0))
    marks = "  [stale]" if s.get("stale") else ""
    if s.get("parent") and s.get("orphan"):
        marks += "  [orphan]"
    head = _output.safe(f"{s.get('session_id')}{host}{rank}  {status}  {idle}  ")
    rest = _output.safe(f"{s.get('task') or '-'}  {where}".rstrip())
    room = width - cells(head) - len(marks)
    if cells(rest) > room:
        rest = cut(rest, max(room, 1))
    return head + rest + marks


def claim_line(c: Doc, now: float) -> str:
    mode = "" if c.get("mode", "exclusive") == "exclusive" else f" ({c.get('mode')})"
    reason = f" — {c['reason']}" if c.get("reason") else ""
    return _output.safe(
        f"{_claims.show_resource(str(c.get('resource')))}{mode}  {c.get('session_id')}  "
        f"{_age(c.get('since'), now)}{reason}"
    )


def wait_line(w: Doc) -> str:
    res = ", ".join(_claims.show_resource(str(r)) for r in w.get("resources") or [])
    pos = f" #{w['position']}" if w.get("position") else ""
    return _output.safe(f"{res}  waited on by {w.get('session_id')}{pos}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def render(
    view: View, *, needle: str = "", selected: int = 0, width: int = 120, notice: str = ""
) -> list[str]:
    """The whole screen as lines (pure: tested without a terminal). The clock in the
    first line is now's (a full screen redraws every second); ``notice``, when given,
    is the second line (the daemon lost, or back)."""
    now = time.time()
    hosts = len({s.get("host") for s in view.sessions}) > 1
    sessions = [s for s in view.sessions if _matches(session_line(s, hosts=hosts), needle)]
    stale = sum(1 for s in view.sessions if s.get("stale"))
    from meshctl.cli._terminal import cut
    from meshctl.cli._terminal import width as cells

    stale_n = f" ({stale} stale)" if stale else ""
    head = (
        f"meshctl top — profile {view.profile} — {_count(len(view.sessions), 'session')}"
        f"{stale_n}, {_count(len(view.claims), 'claim')}, {len(view.waiting)} waiting"
    )
    if needle:
        head += f" — filter: {needle}"
    clock = f" — {time.strftime('%H:%M:%S', time.localtime(now))}"  # kept when cut
    out = [
        cut(head, width - cells(clock)) + clock,
        notice,
        "SESSIONS  (id  status  idle  task  where)",
    ]
    if not sessions:
        out.append("  (none)")
    for i, s in enumerate(sessions):
        line = session_line(s, hosts=hosts, width=width - 2)
        out.append(("> " if i == selected else "  ") + line)
    claims = [c for c in view.claims if _matches(claim_line(c, now), needle)]
    out += ["", "CLAIMS  (resource  holder  held for — reason)"]
    out += [f"  {claim_line(c, now)}" for c in claims] or ["  (none)"]
    if view.waiting:
        out += ["", "QUEUES"]
        out += [f"  {wait_line(w)}" for w in view.waiting]
    if view.jobs:
        out += ["", "JOBS"]
        for j in view.jobs:
            state = "running" if j.get("running") else "idle"
            end = j.get("last_end") or {}
            last = f", last exit {end.get('exit')}" if end.get("outcome") != "died" else ", DIED"
            pending = f", NOT RUN x{len(j['pending'])} (critical)" if j.get("pending") else ""
            out.append(_output.safe(f"  {j.get('name')}  {state}{last if end else ''}{pending}"))
    if view.handoffs:
        out += ["", "HANDOFFS (newest last)"]
        for h in view.handoffs:
            to = f" → {h['to']}" if h.get("to") else ""
            text = str(h.get("summary") or "")[:80]
            out.append(
                _output.safe(f"  {_age(h.get('at') or h.get('created_at'), now)} ago  "
                             f"{h.get('from')}{to}: {text}")
            )  # fmt: skip
    if view.changes:
        out += ["", "CHANGED FILES (newest last)"]
        for ch in view.changes:
            out.append(
                _output.safe(f"  {_age(ch.get('at'), now)} ago  {ch.get('session_id')}  "
                             f"{_output.tilde(ch.get('path'))}")
            )  # fmt: skip
    return [cut(line, width) for line in out]


def detail(view: View, sid: str) -> list[str]:
    """One session opened: every reported field and its claims."""
    from meshctl.cli.sessions import render_one

    s = next((x for x in view.sessions if x.get("session_id") == sid), None)
    if s is None:
        return [f"{sid} is gone.", "", "Esc: back"]
    return [*_output.safe(render_one(s), multiline=True).splitlines(), "", "Esc: back   q: quit"]


class Feed:
    """The watch connection: a thread that sets :attr:`changed` on every event.

    When the daemon goes away (a restart, a stop) the thread says so in :attr:`lost`
    and tries again, every second, on a connection that never starts a daemon (top
    must not bring back one a person just stopped); once it is back, :attr:`back`
    says when, and :attr:`changed` makes the view read everything again.
    """

    RETRY = 1.0

    def __init__(self, state: State) -> None:
        self.changed = threading.Event()
        self.lost: str | None = None
        """Why the daemon is out of reach, while it is."""
        self.back: float | None = None
        """When the daemon was reached again after being lost (wall clock)."""
        self._state = state
        self._closing = threading.Event()
        self._conn: Any = self._open(autostart=True)
        self._thread = threading.Thread(target=self._run, name="meshctl-top-feed", daemon=True)
        self._thread.start()

    def _open(self, *, autostart: bool) -> Any:
        from meshctl._blocking import Connection

        mesh = self._state.mesh()
        conn = Connection(mesh.profile, mesh.socket_path, autostart=autostart,
                          timeout=mesh.timeout)  # fmt: skip
        try:
            conn.call("mesh.watch")
        except BaseException:
            conn.close()
            raise
        return conn

    def _run(self) -> None:
        from meshd.protocol.errors import MeshError

        while not self._closing.is_set():
            try:
                while True:
                    if self._conn.next_event(3600.0) is not None:
                        self.changed.set()
            except (MeshError, OSError) as exc:
                if self._closing.is_set():
                    return
                self._conn.close()
                self.lost = str(exc)
                self.changed.set()
            while not self._closing.wait(self.RETRY):
                try:
                    self._conn = self._open(autostart=False)
                except (MeshError, OSError) as exc:
                    self.lost = str(exc)
                    continue
                self.lost, self.back = None, time.time()
                self.changed.set()
                break

    def close(self) -> None:
        self._closing.set()
        self._conn.close()


def _plain(state: State, feed: Feed) -> None:
    """Print the view, then again after each change (a log of views); say so on stderr
    when the daemon goes away and when it is back. Returns when stdout's reader left
    (``top | head``): checked every second, not only when something changes."""
    told = False  # whether the loss in progress was told
    while True:
        feed.changed.clear()
        if feed.lost is not None:
            if not told:
                _output.note(f"lost the daemon ({feed.lost}); reconnecting (Ctrl-C stops)")
                told = True
        else:
            if told:
                _output.note("reconnected to the daemon")
                told = False
            view = _fetch_or_none(state)
            if view is not None and not _print(render(view, selected=-1, width=10_000)):
                return
        while not feed.changed.wait(1.0):
            if _reader_gone(sys.stdout):
                return


def _fetch_or_none(state: State) -> View | None:
    """The view, or None when the daemon went away meanwhile (the feed says so next)."""
    from meshd.protocol.errors import MeshUnavailable

    try:
        return fetch(state)
    except MeshUnavailable:
        return None


def _print(lines: list[str]) -> bool:
    """Print one view; False when stdout's reader is gone."""
    try:
        click.echo("\n".join(lines) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        return False
    return True


def _reader_gone(stream: Any) -> bool:
    """Whether nobody reads ``stream`` any more: a pipe whose reader closed (POLLERR)
    or a terminal hung up, seen without writing to it."""
    import select

    try:
        poller = select.poll()
        poller.register(stream.fileno(), 0)
        events = poller.poll(0)
    except (OSError, ValueError, AttributeError):
        return False
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in events)


def _full_screen(state: State, feed: Feed) -> None:
    import curses

    def main(scr: Any) -> None:
        curses.curs_set(0)
        scr.timeout(200)
        ui = _Screen(scr, state, feed)
        while ui.step():
            pass

    curses.wrapper(main)


def _notice(feed: Feed) -> str:
    """The daemon's reachability, for the full-screen view's second line."""
    if feed.lost is not None:
        return f"lost the daemon ({feed.lost}); reconnecting — the view below is old"
    if feed.back is not None and time.time() - feed.back < 60:
        at = time.strftime("%H:%M:%S", time.localtime(feed.back))
        return f"reconnected to the daemon at {at}"
    return ""


#: Seconds between two reads of the view when nothing changed (stale marks, idle times).
REFRESH_S = 2.0


class _Screen:
    """The full-screen loop: redraw on a change or every second; keys act at once.
    The view is also read again every :data:`REFRESH_S` without a change: a session
    turns stale, and idle times grow, with nothing pushed."""

    def __init__(self, scr: Any, state: State, feed: Feed) -> None:
        self.scr, self.state, self.feed = scr, state, feed
        self.view = fetch(state)
        self.fetched = time.monotonic()
        self.needle = ""
        self.selected = 0
        self.opened: str | None = None
        self.typing = False
        self.keys: dict[int, Callable[[], bool]] = {
            ord("q"): lambda: False,
            ord("/"): self._start_filter,
            ord("j"): lambda: self._move(1),
            ord("k"): lambda: self._move(-1),
            258: lambda: self._move(1),  # KEY_DOWN
            259: lambda: self._move(-1),  # KEY_UP
            10: self._open,
            13: self._open,
            27: self._back,
        }

    def step(self) -> bool:
        due = time.monotonic() - self.fetched >= REFRESH_S
        if self.feed.changed.is_set() or due:
            self.feed.changed.clear()
            if self.feed.lost is None:
                self.view = _fetch_or_none(self.state) or self.view
                self.fetched = time.monotonic()
        self._draw()
        key = self.scr.getch()
        if key == -1:
            return True
        if self.typing:
            return self._type(key)
        action = self.keys.get(key)
        return action() if action is not None else True

    def _visible(self) -> list[dict[str, Any]]:
        return [s for s in self.view.sessions if _matches(session_line(s), self.needle)]

    def _draw(self) -> None:
        height, width = self.scr.getmaxyx()
        if self.opened is not None:
            lines = detail(self.view, self.opened)
        else:
            lines = render(self.view, needle=self.needle, selected=self.selected,
                           width=width - 1, notice=_notice(self.feed))  # fmt: skip
            keys = "q quit  / filter  j/k move  Enter open"
            footer = (
                f"filter: {self.needle}_"
                if self.typing
                else (f"filter: {self.needle}   " if self.needle else "") + keys
            )
            lines = [*lines[: height - 2], "", footer]
        self.scr.erase()
        for y, line in enumerate(lines[:height]):
            self.scr.addnstr(y, 0, line, width - 1)
        self.scr.refresh()

    def _start_filter(self) -> bool:
        self.typing, self.needle = True, ""
        return True

    def _type(self, key: int) -> bool:
        if key in (10, 13, 27):
            self.typing = False
        elif key in (8, 127, 263):
            self.needle = self.needle[:-1]
        elif 32 <= key < 127:
            self.needle += chr(key)
        self.selected = 0
        return True

    def _move(self, by: int) -> bool:
        n = len(self._visible())
        self.selected = max(0, min(self.selected + by, n - 1))
        return True

    def _open(self) -> bool:
        visible = self._visible()
        if visible and self.opened is None:
            self.opened = str(visible[min(self.selected, len(visible) - 1)].get("session_id"))
        return True

    def _back(self) -> bool:
        self.opened = None
        return True
