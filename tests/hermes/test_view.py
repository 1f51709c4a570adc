"""The inbox a hook hands the model comes from the daemon's pushes, not from a request
on the hook's path, and nothing is lost or shown twice on the way (meshctl.hermes._view).

The real plugin runs in this process (it is standard library only; the last test runs
it installed, in the real Hermes) against the test's real daemon, through a relay on a Unix socket that passes every frame and
counts the requests by method: what the hooks asked is read off the wire. The relay
can also cut the connection that subscribed to events, as a daemon does with a
reader that fell behind.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import DaemonHandle, MeshEnv
from tests.hermes.conftest import Hermes
from tests.support import wait_for

from meshctl.hermes._hooks import hooks
from meshctl.hermes._runtime import Runtime

S = "20261202_070000_aaaaaa"
OTHER = "cli:other"


class CountingRelay:
    """Passes frames between clients and the daemon and counts each request's method
    (and the session it names) and each pushed event's kind; :meth:`cut` closes every
    connection that sent a given method; :meth:`hold` keeps a kind of request from
    the daemon until :meth:`release`, as a daemon slow to answer it would (the daemon
    answers a connection's requests in any order: replies are matched by id)."""

    def __init__(self, upstream: Path, path: Path) -> None:
        self.upstream = upstream
        self.path = path
        self.counts: Counter[str] = Counter()
        #: (method, session id named) -> requests
        self.asked: Counter[tuple[str, str | None]] = Counter()
        #: kind -> events pushed to the clients
        self.pushed: Counter[str] = Counter()
        #: requests kept from the daemon so far by :meth:`hold`
        self.held = 0
        self._holds: set[tuple[str, str]] = set()
        #: (method, session id) -> (upstream, line) held back, in order
        self._kept: dict[tuple[str, str], list[tuple[socket.socket, bytes]]] = {}
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket, list[str]]] = []
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            up = socket.socket(socket.AF_UNIX)
            try:
                up.connect(str(self.upstream))
            except OSError:  # the daemon is away: the client sees the connection close
                client.close()
                up.close()
                continue
            sent: list[str] = []
            with self._lock:
                self._pairs.append((client, up, sent))
            for fn in (partial(self._down, up, client), partial(self._up, client, up, sent)):
                t = threading.Thread(target=self._pump, args=(fn, client, up), daemon=True)
                t.start()
                self._threads.append(t)

    @staticmethod
    def _pump(fn: Callable[[], None], a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError, ValueError):
            fn()
        for s in (a, b):  # either side done: the pair is over (the other pump ends too)
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _up(self, client: socket.socket, up: socket.socket, sent: list[str]) -> None:
        with client.makefile("rb") as lines:
            for line in lines:
                request = json.loads(line)
                method = str(request.get("method"))
                params = request.get("params")
                sid = params.get("session_id") if isinstance(params, dict) else None
                with self._lock:
                    self.counts[method] += 1
                    self.asked[method, sid] += 1
                    sent.append(method)
                    if isinstance(sid, str) and (method, sid) in self._holds:
                        self._kept.setdefault((method, sid), []).append((up, line))
                        self.held += 1
                        continue
                up.sendall(line)

    def _down(self, up: socket.socket, client: socket.socket) -> None:
        with up.makefile("rb") as lines:
            for line in lines:
                frame = json.loads(line)
                if frame.get("method") == "event" and isinstance(frame.get("params"), dict):
                    with self._lock:
                        self.pushed[str(frame["params"].get("kind"))] += 1
                client.sendall(line)

    def hold(self, method: str, session_id: str) -> None:
        """Keep every ``method`` request for ``session_id`` from the daemon until
        :meth:`release` (the connection's other requests pass)."""
        with self._lock:
            self._holds.add((method, session_id))

    def release(self, method: str | None = None, session_id: str | None = None) -> None:
        """Pass on what :meth:`hold` kept for ``method`` and ``session_id`` (default:
        everything), in order, and hold it no more."""
        with self._lock:
            for key in [k for k in self._holds if method in (None, k[0])
                        and session_id in (None, k[1])]:  # fmt: skip
                self._holds.discard(key)
                for up, line in self._kept.pop(key, []):
                    with contextlib.suppress(OSError):
                        up.sendall(line)

    def count(self, method: str, *, hooks_only: bool = False) -> int:
        """Requests of ``method`` so far; ``hooks_only``: not counting the connection
        that subscribed to events (the plugin's listener, off the hooks' path)."""
        with self._lock:
            if not hooks_only:
                return self.counts[method]
            return sum(
                sent.count(method) for _, _, sent in self._pairs if "events.subscribe" not in sent
            )

    def cut(self, method: str) -> int:
        """Close every connection that sent ``method``; how many."""
        with self._lock:
            pairs = [p for p in self._pairs if method in p[2]]
            self._pairs = [p for p in self._pairs if method not in p[2]]
        for client, up, _ in pairs:
            for s in (client, up):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
        return len(pairs)

    def close(self) -> None:
        self.server.close()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for client, up, _ in pairs:
            for s in (client, up):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


@pytest.fixture
def relay(daemon: DaemonHandle, monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingRelay]:
    r = CountingRelay(daemon.socket, daemon.socket.parent / "relay.sock")
    monkeypatch.setenv("MESH_SOCKET", str(r.path))
    yield r
    r.close()


@pytest.fixture
def rt(relay: CountingRelay, daemon: DaemonHandle) -> Iterator[Runtime]:
    runtime = Runtime("default")
    yield runtime
    runtime.end(S)
    runtime.close()


@pytest.fixture
def fast_beats(mesh_env: MeshEnv) -> None:
    mesh_env.write_config("[defaults]\nheartbeat_interval = 0.3\n")


def start(rt: Runtime, daemon: DaemonHandle, relay: CountingRelay) -> None:
    """The session starts, another session is there, the plugin subscribed to the
    session's events and its view is in sync."""
    hooks(rt)["on_session_start"](session_id=S, platform="cli", model="m")
    daemon.call("session.register", {"session_id": OTHER, "task": "watching CI"})
    wait_for(lambda: relay.count("events.subscribe"), what="the plugin subscribed to events")
    in_sync(rt)


def in_sync(rt: Runtime, timeout: float = 30) -> None:
    wait_for(lambda: rt.view.in_sync(rt.sessions[S]), timeout=timeout, what="the view in sync")


def send(daemon: DaemonHandle, text: str) -> int:
    reply = daemon.call("message.send", {"session_id": OTHER, "to": S, "text": text})
    return int(reply["result"]["id"])


def ask(daemon: DaemonHandle, params: dict[str, Any]) -> Any:
    """``query.ask`` on a connection of its own; its result (it waits up to 90 s)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(90)
        s.connect(str(daemon.socket))
        request = {"jsonrpc": "2.0", "id": 1, "method": "query.ask", "params": params}
        s.sendall(json.dumps(request).encode() + b"\n")
        with s.makefile("rb") as lines:
            return json.loads(lines.readline())["result"]


def state(daemon: DaemonHandle, msg_id: int) -> str:
    reply = daemon.call("message.status", {"session_id": OTHER, "ids": [msg_id]})
    return str(reply["result"]["states"][str(msg_id)])


def tool_call(rt: Runtime, tool: str = "terminal", args: Any = None) -> str:
    """One tool call's hooks as Hermes fires them; the tool result the model gets."""
    table = hooks(rt)
    call = dict(tool_name=tool, args=args or {"command": "ls"}, session_id=S, task_id="t",
                tool_call_id="c", turn_id="u")  # fmt: skip
    table["pre_tool_call"](**call)
    out = table["transform_tool_result"](result='{"ok": true}', **call)
    table["post_tool_call"](result='{"ok": true}', status="ok", duration_ms=1, **call)
    return str(out or '{"ok": true}')


def test_a_message_reaches_the_next_tool_result_with_no_inbox_request_on_the_hooks_path(
    rt: Runtime, daemon: DaemonHandle, relay: CountingRelay
) -> None:
    hooks(rt)["on_session_start"](session_id=S, platform="cli", model="m")
    daemon.call("session.register", {"session_id": OTHER, "task": "watching CI"})
    wait_for(lambda: relay.count("events.subscribe"), what="the plugin subscribed to events")
    idle = tool_call(rt)
    asked = relay.count("message.inbox", hooks_only=True)

    msg = send(daemon, "tests are red on main")
    wait_for(lambda: state(daemon, msg) == "delivered", what="the push of the message")
    said = tool_call(rt)
    rt.flush()

    assert idle == '{"ok": true}', "nothing waited: the result is the tool's own"
    assert "tests are red on main" in said
    assert said.split("\n\n", 1)[1].startswith("[Session Mesh]")
    assert relay.count("message.inbox", hooks_only=True) == asked, "a hook asked for the inbox"
    assert state(daemon, msg) == "read", "shown to the model, then acknowledged"
    assert "tests are red on main" not in tool_call(rt), "shown once"


def test_a_write_asks_the_claim_check_only(
    rt: Runtime, daemon: DaemonHandle, relay: CountingRelay, tmp_path: Path
) -> None:
    start(rt, daemon, relay)
    before = relay.counts.copy()

    tool_call(rt, "write_file", {"path": str(tmp_path / "auth.py"), "content": "x"})

    asked = relay.counts - before
    assert asked["claim.check"] == 1
    assert asked["message.inbox"] == 0


def test_a_pushed_message_stays_unread_until_a_hook_shows_it(
    rt: Runtime, daemon: DaemonHandle, relay: CountingRelay
) -> None:
    """Pushed (delivered) is not read: Hermes dies before a hook ran, and the message is
    still in the inbox for the session's next process."""
    start(rt, daemon, relay)
    msg = send(daemon, "please look at the deploy")
    wait_for(lambda: rt.view.held(S), what="the message in the view")
    rt.flush()  # nothing shown: nothing to acknowledge

    # pushed, so delivered (stored a moment after the push), and not read
    wait_for(lambda: state(daemon, msg) == "delivered", what=lambda: state(daemon, msg))
    rt.close()  # the process ends without a hook: nothing surfaced

    again = Runtime("default")
    try:
        hooks(again)["on_session_start"](session_id=S, platform="cli", model="m")
        table = hooks(again)
        out = table["transform_tool_result"](result="{}", tool_name="terminal", args={},
                                             session_id=S, tool_call_id="c")  # fmt: skip
        again.flush()
        assert "please look at the deploy" in str(out)
        assert state(daemon, msg) == "read"
    finally:
        again.end(S)
        again.close()


def test_a_changed_file_notice_pushed_to_the_plugin_is_shown_at_the_next_tool_call(
    rt: Runtime, daemon: DaemonHandle, relay: CountingRelay, tmp_path: Path
) -> None:
    """With a subscriber, the daemon pushes the notice instead of keeping it in the
    inbox: the view holds it until a hook shows it, framed as the daemon's."""
    (tmp_path / "auth.py").write_text("x")
    start(rt, daemon, relay)
    tool_call(rt, "read_file", {"path": str(tmp_path / "auth.py")})
    rt.flush()  # the read is on the board: the chat is told of changes to the file

    changed = daemon.call("board.changed", {"session_id": OTHER, "paths": [str(tmp_path /
                          "auth.py")], "summary": "login returns a token now"})  # fmt: skip
    assert changed["result"]["notified"] == [S], changed
    wait_for(lambda: rt.view.held(S), what="the notice in the view")
    said = tool_call(rt)

    assert "[notice from the mesh daemon] notice: " in said
    assert "login returns a token now" in said
    assert "login returns a token now" not in tool_call(rt), "shown once"


def test_a_cut_subscription_is_read_again_and_loses_nothing(
    rt: Runtime, daemon: DaemonHandle, relay: CountingRelay
) -> None:
    start(rt, daemon, relay)
    first = send(daemon, "one: before the cut")
    wait_for(lambda: rt.view.held(S), what="the first message in the view")

    assert relay.cut("events.subscribe") == 1
    wait_for(lambda: not rt.view.in_sync(rt.sessions[S]), what="the view out of sync")
    second = send(daemon, "two: while cut")
    shown = [tool_call(rt)]  # out of sync: this hook reads the inbox itself
    in_sync(rt)
    third = send(daemon, "three: after the new subscription")
    wait_for(lambda: state(daemon, third) == "delivered", what="the push of the third")
    shown += [tool_call(rt), tool_call(rt)]
    rt.flush()

    text = "\n".join(shown)
    for words in ("one: before the cut", "two: while cut", "three: after the new"):
        assert text.count(words) == 1, (words, shown)
    assert [state(daemon, i) for i in (first, second, third)] == ["read"] * 3


def test_a_daemon_restart_midway_loses_nothing(
    fast_beats: None, rt: Runtime, daemon: DaemonHandle, relay: CountingRelay
) -> None:
    """A message pushed but not yet shown when the daemon restarts is still unread in
    its store; the plugin registers again, reads the inbox again, and shows it once,
    with what came after the restart."""
    start(rt, daemon, relay)
    first = send(daemon, "one: before the restart")
    wait_for(lambda: rt.view.held(S), what="the first message in the view")
    wait_for(lambda: state(daemon, first) == "delivered", what="its delivery stored")

    daemon.stop()
    daemon.start()
    shown: list[str] = []

    def registered_again() -> bool:
        shown.append(tool_call(rt))
        return bool(daemon.call("session.get", {"session_id": S}).get("result"))

    wait_for(registered_again, timeout=60, interval=0.2, what="the session registered again")
    daemon.call("session.register", {"session_id": OTHER, "task": "watching CI"})
    second = send(daemon, "two: after the restart")
    wait_for(lambda: "two: after the restart" in "".join(shown) or shown.append(tool_call(rt)),
             timeout=60, interval=0.2, what="the second message shown")  # fmt: skip
    rt.flush()

    text = "\n".join(shown)
    assert text.count("one: before the restart") == 1, shown
    assert text.count("two: after the restart") == 1, shown
    # acknowledged by the sender, whose link may still be pausing after the restart
    wait_for(lambda: state(daemon, first) == state(daemon, second) == "read", timeout=30,
             what=lambda: (state(daemon, first), state(daemon, second)))  # fmt: skip


def test_a_session_registered_again_is_followed_again(
    fast_beats: None, rt: Runtime, daemon: DaemonHandle, relay: CountingRelay
) -> None:
    """The daemon ends the session under a live plugin (as an expiry does); the plugin
    registers it again on the same connection, and subscribes and answers for it again:
    its messages are pushed again, with no inbox request on the hooks' path."""
    start(rt, daemon, relay)
    daemon.call("session.end", {"session_id": S, "reason": "expired"})
    wait_for(lambda: daemon.call("session.get", {"session_id": S}).get("result"), timeout=30,
             what="the session registered again by the plugin's heartbeats")  # fmt: skip
    in_sync(rt)
    asked = relay.count("message.inbox", hooks_only=True)

    msg = send(daemon, "still there?")
    wait_for(lambda: state(daemon, msg) == "delivered", what="the push of the message")
    said = tool_call(rt)

    assert "still there?" in said
    assert relay.count("message.inbox", hooks_only=True) == asked
    assert S in rt.responding


S2 = "20261202_070000_bbbbbb"


@pytest.fixture
def slow_reply_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of the plugin's calls waits 2 s for its reply (``MESH_HERMES_TIMEOUT``; 0.5 s
    by default): room for a test to put a push on the wire while a reply is held."""
    monkeypatch.setenv("MESH_HERMES_TIMEOUT", "2")


def test_a_reply_that_times_out_costs_the_other_sessions_nothing(
    slow_reply_window: None,
    rt: Runtime,
    daemon: DaemonHandle,
    relay: CountingRelay,
    tmp_path: Path,
) -> None:
    """A second session starts while the daemon is slow to answer the plugin's
    ``query.respond`` for it (held by the relay past the plugin's timeout), and a
    changed-file notice and a question for the first are pushed meanwhile: the
    connection is kept, so the notice (pushed, never kept in an inbox) is shown, the
    question waits for the first session's model (not answered with its status), the
    first session stays subscribed, and the second is followed once the daemon
    answers."""
    (tmp_path / "auth.py").write_text("x")
    start(rt, daemon, relay)
    tool_call(rt, "read_file", {"path": str(tmp_path / "auth.py")})
    rt.flush()  # the read is on the board: the chat is told of changes to the file
    asked: list[Any] = []
    asking = threading.Thread(target=lambda: asked.append(
        ask(daemon, {"session_id": OTHER, "to": S, "question": "which branch?", "timeout": 60})
    ))  # fmt: skip

    relay.hold("query.respond", S2)
    try:
        hooks(rt)["on_session_start"](session_id=S2, platform="cli", model="m")
        wait_for(lambda: relay.held, what="the plugin's query.respond for the second session")
        changed = daemon.call("board.changed", {"session_id": OTHER, "paths": [str(tmp_path /
                              "auth.py")], "summary": "login returns a token now"})  # fmt: skip
        assert changed["result"]["notified"] == [S], changed
        wait_for(lambda: relay.pushed["file.changed"], what="the notice on its way to the plugin")
        asking.start()  # its model is at work (a tool runs): the question waits for it
        wait_for(lambda: relay.pushed["query"], what="the question on its way to the plugin")
        # the plugin gave up waiting for that reply and asks again (on this connection or
        # a new one): the notice reached it before
        wait_for(lambda: relay.asked["query.respond", S2] >= 2, timeout=60,
                 what="the plugin asking again after its timeout")  # fmt: skip
    finally:
        relay.release()
    wait_for(lambda: rt.view.in_sync(rt.sessions[S2]), timeout=30, what="the second in sync")
    wait_for(lambda: rt.askers, what="the question handed to the model")
    said = tool_call(rt)
    [query_id] = rt.askers
    daemon.call("query.answer", {"session_id": S, "query_id": query_id, "text": "main"})
    asking.join(60)
    hooks(rt)["on_session_finalize"](session_id=S2, reason="done")

    assert "login returns a token now" in said, "the pushed notice was lost"
    assert "which branch?" in said
    assert asked[0]["answered_by"] != "status", asked
    assert asked[0]["answer"] == "main", asked
    assert relay.asked["events.subscribe", S] == 1, "the first session was subscribed again"
    assert relay.count("mesh.info") - relay.count("mesh.info", hooks_only=True) == 1, (
        "the plugin's listener connection was opened again"
    )
    assert rt.view.in_sync(rt.sessions[S])
    assert {S, S2} <= rt.responding


def test_a_session_half_followed_is_not_said_to_be_answered_for(
    rt: Runtime, daemon: DaemonHandle, relay: CountingRelay
) -> None:
    """``query.respond`` answered, ``events.subscribe`` not in time: the session is not
    among those the plugin serves until its subscription and read are done."""
    start(rt, daemon, relay)
    relay.hold("events.subscribe", S2)
    try:
        hooks(rt)["on_session_start"](session_id=S2, platform="cli", model="m")
        wait_for(lambda: relay.asked["events.subscribe", S2] >= 2, timeout=60,
                 what="the plugin following it again after its timeout")  # fmt: skip
        half = set(rt.responding)
    finally:
        relay.release()
    wait_for(lambda: S2 in rt.responding, timeout=30, what="the second served in full")
    in_sync = rt.view.in_sync(rt.sessions[S2])
    hooks(rt)["on_session_finalize"](session_id=S2, reason="done")

    assert S2 not in half, half
    assert S in half, "the first session is still served"
    assert in_sync


@pytest.fixture
def long_replies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of the plugin's calls waits up to 60 s for its reply: a reply the relay
    holds is held for as long as the test says, never given up on."""
    monkeypatch.setenv("MESH_HERMES_TIMEOUT", "60")


def test_a_session_ended_and_started_again_under_a_busy_responder_is_followed_anew(
    long_replies: None, rt: Runtime, daemon: DaemonHandle, relay: CountingRelay
) -> None:
    """The session ends and starts again with the same id (a resumed chat) while the
    responder still waits for the inbox read of its first registration: that read
    belongs to a registration that is gone, so it makes nothing in sync, and the new
    registration is subscribed and read anew -- its messages are pushed and shown."""
    daemon.call("session.register", {"session_id": OTHER, "task": "watching CI"})
    relay.hold("message.inbox", S)
    try:
        hooks(rt)["on_session_start"](session_id=S, platform="cli", model="m")
        wait_for(lambda: relay.held, what="the inbox read of the first registration")
        hooks(rt)["on_session_finalize"](session_id=S, reason="done")
        hooks(rt)["on_session_start"](session_id=S, platform="cli", model="m")
    finally:
        relay.release()
    wait_for(lambda: relay.asked["events.subscribe", S] >= 2, timeout=30,
             what="the new registration subscribed")  # fmt: skip
    in_sync(rt)
    send(daemon, "for the resumed chat")
    shown: list[str] = []
    wait_for(lambda: shown.append(tool_call(rt)) or "for the resumed chat" in shown[-1],
             timeout=30, what=lambda: shown[-3:])  # fmt: skip


def test_what_comes_for_a_session_as_it_ends_is_not_kept(
    long_replies: None, rt: Runtime, daemon: DaemonHandle, relay: CountingRelay
) -> None:
    """Between the plugin forgetting an ending session and the daemon ending it, a push
    for it and the late inbox read of its registration still come in: the view keeps
    nothing of them (a gateway ends many sessions over weeks)."""
    daemon.call("session.register", {"session_id": OTHER, "task": "watching CI"})
    relay.hold("message.inbox", S)
    relay.hold("session.end", S)
    table = hooks(rt)
    ending = threading.Thread(target=table["on_session_finalize"],
                              kwargs={"session_id": S, "reason": "done"})  # fmt: skip
    try:
        table["on_session_start"](session_id=S, platform="cli", model="m")
        wait_for(lambda: relay.held == 1, what="the inbox read of the session")
        send(daemon, "one: while it runs")  # pushed, read once the inbox read is in
        wait_for(lambda: relay.pushed["message"] == 1, what="the push of the first")
        ending.start()
        wait_for(lambda: relay.held == 2, what="the session's end on its way")
        send(daemon, "two: while it ends")  # still live on the daemon: pushed
        wait_for(lambda: relay.pushed["message"] == 2, what="the push of the second")
        relay.release("message.inbox", S)  # the read comes back after the forgetting
        # the responder follows a second session only after both: once it is in sync,
        # the push and the read for the first were taken (or not)
        table["on_session_start"](session_id=S2, platform="cli", model="m")
        wait_for(lambda: rt.view.in_sync(rt.sessions[S2]), timeout=30,
                 what="the second session in sync")  # fmt: skip
    finally:
        relay.release()
        if ending.is_alive() or ending.ident is not None:
            ending.join(30)
    kept = rt.view.kept()
    table["on_session_finalize"](session_id=S2, reason="done")

    assert S not in kept, kept


def test_an_item_shown_as_its_session_ends_under_a_hung_daemon_is_acknowledged_later(
    rt: Runtime, daemon: DaemonHandle, relay: CountingRelay
) -> None:
    """The model is shown a message, then the session ends while the daemon is stopped
    (SIGSTOP): the acknowledgement cannot go with the end, and is sent once the daemon
    answers again (it takes those of an ended session). Left unsent, the message
    stayed unread for good, and the session's next Hermes process showed it again."""
    start(rt, daemon, relay)
    msg = send(daemon, "read me once")
    wait_for(lambda: rt.view.held(S), what="the message in the view")
    wait_for(lambda: state(daemon, msg) == "delivered", what="its delivery stored")
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGSTOP)
    try:
        said = tool_call(rt)  # from the view: nothing asked of the daemon on the way
        rt.flush()  # the status times out: the sender pauses, the acknowledgement waits
        hooks(rt)["on_session_finalize"](session_id=S, reason="done")
    finally:
        daemon.proc.send_signal(signal.SIGCONT)

    assert "read me once" in said
    wait_for(lambda: state(daemon, msg) == "read", timeout=60,
             what=lambda: state(daemon, msg))  # fmt: skip


IN_HERMES = r"""
import json, sys, time, model_tools
from hermes_cli.plugins import invoke_hook
import hermes_plugins.meshd._plugin as plugin

S = sys.argv[1]
invoke_hook("on_session_start", session_id=S, model="fake-model", platform="cli")
rt = plugin._RUNTIMES["rt"]
deadline = time.monotonic() + 60
while not rt.view.in_sync(rt.sessions[S]) and time.monotonic() < deadline:
    time.sleep(0.01)
print("ready", flush=True)
sys.stdin.readline()  # a message was sent to S
while not rt.view.held(S) and time.monotonic() < deadline:
    time.sleep(0.01)
call = dict(tool_name="terminal", args={"command": "ls"}, session_id=S, task_id="t",
            tool_call_id="c", turn_id="u", api_request_id="r")
invoke_hook("pre_tool_call", **call)
out = invoke_hook("transform_tool_result", result='{"output": ""}', **call)
invoke_hook("post_tool_call", result='{"output": ""}', status="ok", duration_ms=1, **call)
rt.flush()
print(json.dumps({"out": out, "fallbacks": rt.view.fallbacks}), flush=True)
invoke_hook("on_session_finalize", session_id=S, platform="cli", reason="shutdown")
"""


def test_in_hermes_the_installed_plugin_shows_a_pushed_message_without_asking(
    daemon: DaemonHandle, relay: CountingRelay, hermes: Hermes
) -> None:
    """The plugin as ``meshctl hermes install`` places it (its own copy of the client),
    loaded and fired by the real Hermes 0.19.0."""
    hermes.env["MESH_SOCKET"] = str(relay.path)
    hermes.install()
    daemon.call("session.register", {"session_id": OTHER, "task": "watching CI"})
    proc = subprocess.Popen(
        [str(hermes.bin / "python"), "-c", IN_HERMES, S], env=hermes.environ(True),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        asked = relay.count("message.inbox", hooks_only=True)
        msg = send(daemon, "tests are red on main")
        proc.stdin.write("sent\n")
        proc.stdin.flush()
        seen = json.loads(proc.stdout.readline())
    finally:
        _, err = proc.communicate(timeout=120)

    assert proc.returncode == 0, err[-3000:]
    [out] = seen["out"]
    assert "tests are red on main" in out
    assert "not from the user" in out
    assert seen["fallbacks"] == 0
    assert relay.count("message.inbox", hooks_only=True) == asked
    assert state(daemon, msg) == "read"
