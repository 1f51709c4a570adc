"""``meshd run`` binds its socket before the daemon's own modules load (meshd.startup).

A client that connects meanwhile waits in the listen backlog for its answer instead
of polling with backoff for a socket that is not there yet; a start that fails after
the bind removes the socket again.
"""

from __future__ import annotations

import signal
import subprocess
import sys

from tests.conftest import MeshEnv, rpc
from tests.support import wait_for

_WATCH_APP = """
import os, sys
sock = os.environ["MESH_SOCKET"]
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "meshd.app":
            sys.meta_path.remove(self)
            print("socket there when meshd.app loads:", os.path.exists(sock), flush=True)
        return None
sys.meta_path.insert(0, Watch())
sys.argv = ["meshd", "run", "--profile", "test"]
from meshd import cli
cli.main()
"""

_NO_APP = """
import sys
sys.modules["meshd.app"] = None  # as if the install were broken past meshd.startup
sys.argv = ["meshd", "run", "--profile", "test"]
from meshd import cli
cli.main()
"""


def test_the_socket_is_there_before_the_daemon_modules_load(mesh_env: MeshEnv) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _WATCH_APP],
        env=mesh_env.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: mesh_env.socket.exists() and rpc(mesh_env.socket, "mesh.ping"))
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)

    assert out.splitlines() == ["socket there when meshd.app loads: True"], err
    assert proc.returncode == 0, err


def test_a_start_that_fails_after_the_bind_leaves_no_socket(mesh_env: MeshEnv) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _NO_APP],
        env=mesh_env.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip

    assert out.returncode != 0
    assert "meshd.app" in out.stderr
    assert not mesh_env.socket.exists()
    assert not (mesh_env.state_dir / "test.socket").exists()
