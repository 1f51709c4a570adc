"""A key that resolves to a name that is not UTF-8 is refused up front (BAD_KEY).

Linux file names are bytes; Python reads one that is not UTF-8 with lone surrogates
(``surrogateescape``). A ``file:`` key through a symlink into such a folder was
accepted, then could be neither stored (the grant's commit answered UNAVAILABLE) nor
written as JSON (a reply listing it answered INTERNAL, for everyone asking). Each
method that makes keys or paths canonical now refuses it, saying which component is
not UTF-8, shown escaped. Real daemon, real folder made with ``os.mkdir(bytes)``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import DaemonHandle
from tests.support import RpcClient


def odd_tree(top: Path) -> Path:
    """``top/tree`` with a folder ``caf\\xe9`` (Latin-1, not UTF-8) and ``link`` to it."""
    tree = top / "tree"
    tree.mkdir()
    odd = os.path.join(os.fsencode(tree), b"caf\xe9")
    os.mkdir(odd)
    os.symlink(odd, tree / "link")
    return tree


def assert_refused(reply: dict[str, Any], key: str) -> None:
    assert reply["error"]["data"]["code"] == "BAD_KEY", reply
    message = reply["error"]["message"]
    assert key in message
    assert '"caf\\xe9" is not UTF-8' in message  # the component, shown escaped
    assert reply["error"]["data"]["component"] == "caf\\xe9"


@pytest.fixture
def tree(daemon: DaemonHandle) -> Path:
    return odd_tree(daemon.state_dir.parent)


@pytest.mark.parametrize(
    ("method", "extra"),
    [
        ("claim.acquire", {}),
        ("claim.acquire", {"wait": 30}),
        ("claim.steal", {"reason": "r"}),
        ("claim.check", {}),
        ("claim.release", {}),
    ],
)
@pytest.mark.parametrize(
    "form", ["file:{t}/link/a", "{t}/link", "repo:{t}/link", "branch:{t}/link:main"]
)
def test_every_claim_method_refuses_the_key(
    daemon: DaemonHandle, tree: Path, method: str, extra: dict[str, Any], form: str
) -> None:
    key = form.format(t=tree)
    with RpcClient(daemon) as c:
        c.call("session.register", session_id="a", liveness="heartbeat")
        sid = {} if method == "claim.check" else {"session_id": "a"}
        reply = c.raw(method, resources=[key], **sid, **extra)
        listed = c.call("claim.list")
        sessions = c.call("session.list")

    assert_refused(reply, key)
    assert listed["claims"] == []  # before: granted, then listing it answered INTERNAL
    assert [s["session_id"] for s in sessions["sessions"]] == ["a"]


def test_a_real_folder_spelled_through_dotdot_is_refused(daemon: DaemonHandle, tree: Path) -> None:
    """Not only links: ``..`` from inside the odd folder resolves through it too."""
    key = f"file:{tree}/link/../link/x"
    with RpcClient(daemon) as c:
        c.call("session.register", session_id="a", liveness="heartbeat")
        assert_refused(c.raw("claim.acquire", session_id="a", resources=[key]), key)


def test_board_changed_and_messages_refuse_the_path(daemon: DaemonHandle, tree: Path) -> None:
    path = f"{tree}/link/a.py"
    with RpcClient(daemon) as c:
        c.call("session.register", session_id="a", liveness="heartbeat")
        changed = c.raw("board.changed", session_id="a", paths=[path])
        sent = c.raw("broadcast.send", session_id="a", path=path, text="hi")
        changes = c.raw("board.changes", project_or_path=path)

    assert_refused(changed, path)
    assert_refused(sent, path)
    assert_refused(changes, path)


SESSION = """
import meshctl
with meshctl.Mesh() as mesh, mesh.session(task="t") as s:
    print(s.session_id, flush=True)
    print([x["cwd"] for x in mesh.sessions()])
"""


@pytest.mark.parametrize("how", ["client", "meshctl"])
def test_a_session_in_a_folder_not_named_in_utf8_registers_escaped(
    daemon: DaemonHandle, tree: Path, how: str
) -> None:
    """Its cwd is reported escaped (``caf\\xe9``): the client's encoder refused it, so
    the session could not register at all. Everyone's ``session.list`` still answers."""
    cwd = os.path.join(os.fsencode(tree), b"caf\xe9")
    os.makedirs(os.path.join(cwd, b".git"))  # a repository in it: repo is a path too
    with open(os.path.join(cwd, b".git", b"HEAD"), "w") as f:
        f.write("ref: refs/heads/main\n")
    argv = (
        [sys.executable, "-c", SESSION]
        if how == "client"
        else [sys.executable, "-m", "meshctl.cli", "register", "--task", "t"]
    )
    done = subprocess.run(
        argv, cwd=cwd, env=daemon.env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    if how == "client":
        assert done.stdout.splitlines()[1] == repr([f"{tree}/caf\\xe9"])
    with RpcClient(daemon) as c:
        listed = c.call("session.list")
    if how == "meshctl":
        (s,) = listed["sessions"]
        assert (s["cwd"], s["repo"], s["branch"]) == (f"{tree}/caf\\xe9",) * 2 + ("main",)
