"""No single request holds the event loop for long (what the tests can assert; the
ping figures are in bench/request_stall.py and docs/PERFORMANCE.md).

* A claim call whose keys name more than ``MAX_FOLDERS`` folders in all is refused
  with ``TOO_LARGE`` and the limit (the claim table's work is one node per folder, on
  the loop, in one step); one at the limit is granted.
* A ``notes.list`` whose notes hold more than ``MAX_LIST_TEXT`` characters of text
  is refused with ``TOO_LARGE`` and the limit (its answer is encoded in one step on
  the loop; 10,000 notes of 8 KiB were an 80 MB line no client reads); the same
  notebook asked for fewer notes answers them all, newest last.
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
MAX_LIST_TEXT = 4 << 20  # meshd.domains.notes.MAX_LIST_TEXT


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


class TestNotesListIsBounded:
    BODY = 8192  # the default max_body_bytes: the longest note there is

    @pytest.fixture
    def full(self, c: RpcClient) -> RpcClient:
        """A notebook of 520 notes of 8,192 characters: 4.06 MiB of text."""
        for i in range(520):
            c.call("notes.add", session_id="w", text=f"{i:04d}" + "n" * (self.BODY - 4))
        return c

    def test_notes_over_the_text_limit_are_too_large(self, full: RpcClient) -> None:
        reply = full.raw("notes.list", session_id="w", limit=520)

        err = reply["error"]
        assert err["data"]["code"] == "TOO_LARGE", str(reply)[:300]
        assert err["data"]["limit"] == MAX_LIST_TEXT
        assert err["data"]["text"] == 520 * self.BODY
        assert err["data"]["notes"] == 520
        assert f"one answer carries at most {MAX_LIST_TEXT:,}" in err["message"]

    def test_fewer_of_the_same_notes_are_answered(self, full: RpcClient) -> None:
        got = full.call("notes.list", session_id="w", limit=500)["entries"]

        assert len(got) == 500
        assert [e["text"][:4] for e in got] == [f"{i:04d}" for i in range(20, 520)]


def test_the_limits_named_here_are_the_daemons() -> None:
    from meshd.domains.claim_keys import MAX_FOLDERS as DAEMONS
    from meshd.domains.notes import MAX_LIST_TEXT as NOTES

    assert DAEMONS == MAX_FOLDERS
    assert NOTES == MAX_LIST_TEXT
