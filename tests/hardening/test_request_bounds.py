"""No single request holds the event loop for long (what the tests can assert; the
ping figures are in bench/request_stall.py and docs/PERFORMANCE.md).

* A claim call whose keys name more than ``MAX_FOLDERS`` folders in all is refused
  with ``TOO_LARGE`` and the limit (the claim table's work is one node per folder, on
  the loop, in one step); one at the limit is granted.
* Paths of a request with more than ``INLINE_PATHS`` of them are resolved off the loop
  and the rest of the work is cut into slices: a ``board.changed`` of 1,000 deep paths
  still records every one, in as many projects.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import DaemonHandle
from tests.support import RpcClient

MAX_FOLDERS = 2048  # claim_keys.MAX_FOLDERS (named here: the test runs on older trees)


@pytest.fixture
def c(daemon: DaemonHandle) -> Any:
    client = RpcClient(daemon)
    client.call("session.register", session_id="w", source="cli", pid=os.getpid(),
                liveness="process")  # fmt: skip
    yield client
    client.close()


def keys(root: Path, n: int, depth: int) -> list[str]:
    """``n`` keys, each ``depth`` folders below ``root`` (which need not exist)."""
    return [f"file:{root}/k{i}/" + "/".join(f"d{j}" for j in range(depth - 1)) for i in range(n)]


def folders(resources: list[str]) -> int:
    return sum(r.removeprefix("file:").count("/") for r in resources)


class TestClaimSetsAreBounded:
    @pytest.mark.parametrize("method", ["claim.acquire", "claim.check", "claim.release"])
    def test_a_set_of_too_many_folders_is_too_large(
        self, c: RpcClient, short_tmp: Path, method: str
    ) -> None:
        resources = keys(short_tmp / "nx", 256, 40)

        reply = c.raw(method, session_id="w", resources=resources)

        err = reply["error"]
        assert err["data"]["code"] == "TOO_LARGE", reply
        assert err["data"]["limit"] == MAX_FOLDERS
        assert err["data"]["folders"] == folders(resources)
        assert f"one call takes at most {MAX_FOLDERS:,}" in err["message"]
        assert c.call("claim.list", session_id="w")["claims"] == []

    def test_a_set_at_the_limit_is_granted(self, c: RpcClient, short_tmp: Path) -> None:
        base = short_tmp / "x"
        depth = (MAX_FOLDERS // 256) - str(base).count("/")
        resources = keys(base, 256, depth)
        assert folders(resources) == MAX_FOLDERS

        reply = c.call("claim.acquire", session_id="w", resources=resources)

        assert reply["status"] == "granted"


def test_a_board_changed_of_1000_deep_paths_records_them_all(
    c: RpcClient, daemon: DaemonHandle, short_tmp: Path
) -> None:
    paths = [f"{short_tmp}/nx{i}/" + "/".join(f"d{j}" for j in range(40)) + "/f.py"
             for i in range(1000)]  # fmt: skip
    other = RpcClient(daemon)

    reply = c.call("board.changed", session_id="w", paths=paths)
    pong = other.call("mesh.ping")
    other.close()

    assert reply["recorded"] == 1000
    assert len(reply["projects"]) == 1000
    assert pong["pong"] is True


def test_a_board_touch_of_1000_paths_records_them_all(c: RpcClient, short_tmp: Path) -> None:
    paths = [f"{short_tmp}/t{i}/" + "/".join(f"d{j}" for j in range(40)) for i in range(1000)]

    reply = c.call("board.touch", session_id="w", paths=paths)

    assert reply["recorded"] == 1000


def test_the_limit_named_here_is_the_daemons() -> None:
    from meshd.domains.claim_keys import MAX_FOLDERS as DAEMONS

    assert DAEMONS == MAX_FOLDERS
