"""A hung mount must not freeze the daemon.

A real hung filesystem: a FUSE mount whose server never answers (this test opens
``/dev/fuse``, mounts it, and never replies, so every look-up under it blocks in
the kernel, as on a dead NFS server). A claim on a path under it is answered
UNAVAILABLE after the resolver's deadline; meanwhile, and afterwards, the daemon
serves everyone else.
"""

from __future__ import annotations

import ctypes
import os
import select
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import DaemonHandle
from tests.hardening.support import Client

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="mounting FUSE needs root"
)


@pytest.fixture
def hung(short_tmp: Path) -> Iterator[Path]:
    """A folder on a FUSE mount that never answers; unmounted (and unblocked) after."""
    mnt = short_tmp / "hung"
    mnt.mkdir()
    fd = os.open("/dev/fuse", os.O_RDWR)
    libc = ctypes.CDLL(None, use_errno=True)
    opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
    if libc.mount(b"hung", str(mnt).encode(), b"fuse.hung", 0, opts) != 0:
        os.close(fd)
        pytest.skip(f"mount of a FUSE file system failed: {os.strerror(ctypes.get_errno())}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        os.close(fd)  # aborts the connection: whatever still waits on it gets ENOTCONN


@pytest.mark.slow
def test_a_claim_under_a_hung_mount_does_not_freeze_the_daemon(
    daemon: DaemonHandle, hung: Path
) -> None:
    with Client(daemon.socket) as c, Client(daemon.socket) as other:
        assert "result" in c.call("session.register", {"session_id": "a"})
        c.send(
            b'{"jsonrpc":"2.0","id":1,"method":"claim.acquire","params":'
            b'{"session_id":"a","resources":["file:' + str(hung).encode() + b'/x"]}}\n'
        )
        pong = other.call("mesh.ping")
        pending = not select.select([c.sock], [], [], 0)[0]  # the claim is still resolving
        stuck = c.reply()
        free = other.call(
            "claim.acquire", {"session_id": "a", "resources": [f"file:{daemon.state_dir}/y"]}
        )

    assert pong["result"]["pong"] is True
    assert pending
    assert stuck["error"]["data"]["code"] == "UNAVAILABLE", stuck
    assert "hung mount" in stuck["error"]["message"]
    assert free["result"]["status"] == "granted"


@pytest.mark.slow
def test_a_local_symlink_into_a_hung_mount_does_not_freeze_the_daemon(
    daemon: DaemonHandle, hung: Path, short_tmp: Path
) -> None:
    """A path on a local disk that is a symlink into the hung mount: caught before it
    is followed (each symlink target is looked up in the mount table first)."""
    link = short_tmp / "link"
    link.symlink_to(hung / "work")
    with Client(daemon.socket) as c, Client(daemon.socket) as other:
        assert "result" in c.call("session.register", {"session_id": "a"})
        c.send(
            b'{"jsonrpc":"2.0","id":1,"method":"claim.check","params":'
            b'{"resources":["file:' + str(link).encode() + b'/x"]}}\n'
        )
        pong = other.call("mesh.ping")
        stuck = c.reply()

    assert pong["result"]["pong"] is True
    assert stuck["error"]["data"]["code"] == "UNAVAILABLE", stuck
