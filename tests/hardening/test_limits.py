"""Limits a client of the same uid cannot push the daemon past.

The frame limit is exact and shared by daemon and clients; connections per uid are
capped; unfinished frames draw on one bounded budget, and their memory is given back;
connections that hold nothing and say nothing are closed after ``idle_timeout``.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from tests.conftest import DaemonHandle, MeshEnv
from tests.hardening.support import CLOSED, Client, raise_own_nofile, wait_for

from meshctl import FrameTooLarge, Mesh, _conn
from meshd.protocol.framing import MAX_FRAME
from meshd.server.frames import PARTIAL_BUDGET


def ping_line(size: int, rid: int = 1) -> bytes:
    """A mesh.ping request of exactly ``size`` bytes, newline not counted."""
    head = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "mesh.ping", "pad": ""})
    pad = size - len(head)
    assert pad >= 0
    line = head[:-2] + "x" * pad + '"}'
    assert len(line) == size
    return line.encode() + b"\n"


def start(mesh_env: MeshEnv, config: str) -> DaemonHandle:
    mesh_env.write_config(config)
    d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
    d.start()
    return d


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class TestFrameLimit:
    def test_a_frame_of_exactly_the_limit_is_read(self, daemon: DaemonHandle) -> None:
        with Client(daemon.socket) as c:
            c.send(ping_line(MAX_FRAME))
            assert c.reply()["result"]["pong"] is True

    @pytest.mark.parametrize("size", [MAX_FRAME + 1, 1_050_000])
    def test_one_byte_more_is_refused_and_closed(self, daemon: DaemonHandle, size: int) -> None:
        """1,048,577 and 1,050,000 bytes were answered before; now -32600 and a close."""
        with Client(daemon.socket) as c:
            try:
                c.send(ping_line(size))
            except BrokenPipeError:
                pass
            err = c.reply()
            assert err["error"]["code"] == -32600
            assert err["error"]["data"] == {"code": "FRAME_TOO_LARGE", "limit": MAX_FRAME}
            assert c.reply() == CLOSED

    def test_refused_before_its_newline_arrives(self, daemon: DaemonHandle) -> None:
        """One byte over the limit without a newline is enough to refuse it."""
        with Client(daemon.socket) as c:
            c.send(b"x" * (MAX_FRAME + 1))
            assert c.reply()["error"]["data"]["code"] == "FRAME_TOO_LARGE"

    def test_client_refuses_exactly_what_the_daemon_refuses(self, daemon: DaemonHandle) -> None:
        """The client's check and the daemon's agree at the boundary: the largest frame
        the client lets through is read by the daemon; one byte more never leaves."""
        proto = _conn.Protocol()
        _, probe = proto.request("mesh.ping", {"pad": ""})
        pad = "x" * (MAX_FRAME + 1 - len(probe))
        proto = _conn.Protocol()
        _, frame = proto.request("mesh.ping", {"pad": pad})
        assert len(frame) == MAX_FRAME + 1  # the newline included
        with Client(daemon.socket) as c:
            c.send(frame)
            reply = c.reply()
        with pytest.raises(FrameTooLarge):
            _conn.Protocol().request("mesh.ping", {"pad": pad + "x"})

        assert reply["error"]["data"]["code"] == "INVALID_PARAMS"  # read and decoded


class TestConnectionCap:
    def test_connections_per_uid_are_capped(self, mesh_env: MeshEnv) -> None:
        """Past max_connections a new connection gets UNAVAILABLE and is closed; once
        one closes, the next is served."""
        d = start(mesh_env, "[defaults]\nmax_connections = 8\n")
        held = [Client(d.socket)]
        try:
            # The start's readiness ping counts until the daemon has seen it close: the
            # eighth connection was refused now and then, on a loaded machine.
            wait_for(lambda: held[0].call("mesh.info")["result"]["counts"]["connections"] == 1)
            held += [Client(d.socket) for _ in range(7)]
            for c in held:
                assert c.call("mesh.ping")["result"]["pong"] is True
            with Client(d.socket) as extra:
                refused = extra.reply()
                assert extra.reply() == CLOSED
            held.pop().close()
            wait_for(lambda: _pings(d.socket))
        finally:
            for c in held:  # closed even after a failure: a later test's GC warned of them
                c.close()
            d.stop()

        assert refused["error"]["data"]["code"] == "UNAVAILABLE"
        assert "too many connections" in refused["error"]["message"]
        assert refused["error"]["data"]["limit"] == 8


def _pings(path: Path) -> bool:
    """One ping on a new connection. Until the daemon has seen a closed connection go,
    the cap still refuses and closes the new one, which can reach the sender as a broken
    pipe: that is "not yet", not a failure."""
    try:
        with Client(path) as c:
            reply = c.call("mesh.ping")
    except (BrokenPipeError, ConnectionResetError):
        return False
    return isinstance(reply, dict) and "result" in reply


class TestPartialFrames:
    @pytest.mark.slow
    def test_a_flood_of_partial_frames_is_bounded_and_memory_returns(
        self, daemon: DaemonHandle
    ) -> None:
        """300 connections each sending ~1 MiB without a newline: those past the shared
        budget are refused, the daemon keeps answering, and its memory returns after."""
        raise_own_nofile(4096)
        assert daemon.proc is not None
        pid = daemon.proc.pid
        before = rss_mib(pid)
        body = b'{"pad":"' + b"x" * (MAX_FRAME - 100)
        socks = []
        for _ in range(300):
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(10)
            s.connect(str(daemon.socket))
            try:
                s.sendall(body)
            except OSError:
                pass  # refused and closed while sending
            socks.append(s)
        peak = rss_mib(pid)
        answered = daemon.call("mesh.ping")["result"]["pong"]
        refused = 0
        for s in socks:
            s.setblocking(False)
            try:
                refused += b"partial_frames" in s.recv(65536)
            except OSError:
                pass
            s.close()
        wait_for(lambda: daemon.call("mesh.info")["result"]["counts"]["connections"] <= 1)
        time.sleep(0.5)
        after = rss_mib(pid)
        print(f"RSS before {before:.0f} MiB, flood {peak:.0f} MiB, after {after:.0f} MiB")

        assert answered is True
        # ~64 fit the budget; a refusal can be lost to a reset while the client still sends
        assert refused >= 300 - 2 * (PARTIAL_BUDGET // MAX_FRAME)
        assert peak - before < 300  # 300 MiB were sent; the budget is 64 MiB
        assert after - before < 32


class TestIdleConnections:
    def test_idle_connection_is_closed(self, mesh_env: MeshEnv) -> None:
        d = start(mesh_env, "[defaults]\nidle_timeout = 0.5\n")
        try:
            with Client(d.socket) as idle:
                assert idle.call("mesh.ping")["result"]["pong"] is True
                assert idle.reply() == CLOSED  # closed by the daemon, not by a timeout here
        finally:
            d.stop()

    def test_connections_that_hold_something_stay(self, mesh_env: MeshEnv) -> None:
        """A subscription, a bound session, or a wait in progress keeps a connection open
        past the idle timeout; a connection holding nothing is closed meanwhile."""
        d = start(mesh_env, "[defaults]\nidle_timeout = 0.5\n")
        try:
            sub, bound, waiting, idle = (Client(d.socket) for _ in range(4))
            bound.call("session.register", {"session_id": "b", "task": "t", "bind": True})
            sub.call("session.register", {"session_id": "s", "task": "t"})
            sub.call("events.subscribe", {"session_id": "s"})
            d.call("session.register", {"session_id": "h", "task": "t"})
            d.call("claim.acquire", {"session_id": "h", "resources": ["port:7001"]})
            waiting.call("session.register", {"session_id": "w", "task": "t"})
            waiting.send(
                json.dumps({"jsonrpc": "2.0", "id": 9, "method": "claim.acquire",
                            "params": {"session_id": "w", "resources": ["port:7001"],
                                       "wait": 30}}).encode() + b"\n"
            )  # fmt: skip
            idle.call("mesh.ping")
            assert idle.reply() == CLOSED
            idle.close()
            time.sleep(1.5)  # three idle timeouts more

            assert sub.call("mesh.ping")["result"]["pong"] is True
            assert bound.call("mesh.ping")["result"]["pong"] is True
            d.call("claim.release", {"session_id": "h", "resources": ["port:7001"]})
            assert waiting.reply()["result"]["status"] == "granted"
            for c in (sub, bound, waiting):
                c.close()
        finally:
            d.stop()

    def test_library_reconnects_after_an_idle_close(self, mesh_env: MeshEnv) -> None:
        """The blocking client notices the closed connection and reconnects on its own."""
        d = start(mesh_env, "[defaults]\nidle_timeout = 0.5\n")
        try:
            with Mesh(autostart=False) as mesh:
                first = mesh.ping()
                wait_for(lambda: d.call("mesh.info")["result"]["counts"]["connections"] == 1)
                second = mesh.ping()
        finally:
            d.stop()

        assert first["pong"] is True
        assert second["pong"] is True

    async def test_async_client_reconnects_after_an_idle_close(self, mesh_env: MeshEnv) -> None:
        """AsyncMesh sees the hang-up before sending on the dead connection, reconnects,
        and its next call is answered (it failed with "closed before replying")."""
        from meshctl import AsyncMesh

        d = start(mesh_env, "[defaults]\nidle_timeout = 0.5\n")
        try:
            async with AsyncMesh(autostart=False) as mesh:
                first = await mesh.ping()
                # Waiting without yielding: the client's reader has not seen the close yet.
                wait_for(lambda: d.call("mesh.info")["result"]["counts"]["connections"] == 1)
                second = await mesh.ping()
        finally:
            d.stop()

        assert first["pong"] is True
        assert second["pong"] is True
