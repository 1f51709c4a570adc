"""The daemon SIGSTOPped longer than ``expire_after``.

Its clients go on heartbeating into sockets nobody reads. On SIGCONT the sweeper
must not expire them all before those heartbeats are read: heartbeat sessions get
one ``stale_after`` of grace, as after a restart.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest
from tests.conftest import DaemonHandle, MeshEnv
from tests.hardening.support import Client, session_ids, wait_for


@pytest.mark.slow
def test_sigstop_longer_than_expire_after_expires_nobody(mesh_env: MeshEnv) -> None:
    mesh_env.write_config("[defaults]\nexpire_after = 1.5\nstale_after = 1.0\n")
    d = DaemonHandle(env=mesh_env.env, socket=mesh_env.socket, state_dir=mesh_env.state_dir)
    d.start()
    stop = threading.Event()
    errors: list[BaseException] = []

    def heartbeat(sid: str) -> None:
        """Heartbeat every 0.2 s on a new connection each time, as hooks do."""
        while not stop.is_set():
            try:
                with Client(d.socket, timeout=30) as c:
                    c.call("session.heartbeat", {"session_id": sid})
            except BaseException as exc:
                errors.append(exc)
                return
            time.sleep(0.2)

    sids = [f"hb{i}" for i in range(5)]
    try:
        with Client(d.socket) as c:
            for sid in sids:
                assert "result" in c.call("session.register", {"session_id": sid})
        threads = [threading.Thread(target=heartbeat, args=(sid,)) for sid in sids]
        for t in threads:
            t.start()
        assert d.proc is not None
        d.proc.send_signal(signal.SIGSTOP)
        time.sleep(3)  # twice expire_after with the daemon stopped
        d.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: "did not run for" in d.logs())  # the first sweep after the resume
        listed = session_ids(d.socket)
        stop.set()
        for t in threads:
            t.join(timeout=30)
    finally:
        stop.set()
        d.stop()

    assert not errors, errors
    assert set(sids) <= listed
