"""meshd.mounts: which paths may hang (network/FUSE mounts), decided before touching them."""

from __future__ import annotations

from pathlib import Path

from meshd.keys import touched_paths
from meshd.mounts import MountTable, parse_mountinfo

LOCAL = "22 1 8:1 / / rw,relatime - ext4 /dev/vda rw\n"


def table(tmp_path: Path, remote: Path) -> MountTable:
    """A mount table (a real file in mountinfo format) with ``remote`` on NFS."""
    info = tmp_path / "mountinfo"
    info.write_text(LOCAL + f"40 22 0:50 / {remote} rw - nfs4 srv:/export rw\n")
    return MountTable(str(info))


def test_parse_mountinfo() -> None:
    text = LOCAL + (
        "41 22 0:51 / /mnt/with\\040space rw - fuse.sshfs me@h:/ rw\n"
        "42 22 0:52 / /run/user/0 rw - tmpfs tmpfs rw\n"
    )
    assert parse_mountinfo(text) == {"/": False, "/mnt/with space": True, "/run/user/0": False}


def test_local_paths_resolve_inline(tmp_path: Path) -> None:
    """Paths and symlinks on local disks may not hang; missing paths neither."""
    remote = tmp_path / "nfs"
    remote.mkdir()
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    with table(tmp_path, remote) as mounts:
        assert not mounts.may_hang(str(tmp_path / "dir" / "f.py"))
        assert not mounts.may_hang(str(tmp_path / "link" / "f.py"))
        assert not mounts.may_hang(str(tmp_path / "missing" / "deeper"))


def test_remote_paths_go_to_the_thread(tmp_path: Path) -> None:
    """Under a network mount, through a local symlink into one, or with '..': the thread."""
    remote = tmp_path / "nfs"
    remote.mkdir()
    (tmp_path / "into").symlink_to(remote / "work")
    (tmp_path / "rel").symlink_to("nfs")
    with table(tmp_path, remote) as mounts:
        assert mounts.may_hang(str(remote))
        assert mounts.may_hang(str(remote / "a" / "b"))
        assert mounts.may_hang(str(tmp_path / "into" / "f.py"))
        assert mounts.may_hang(str(tmp_path / "rel" / "f.py"))
        assert mounts.may_hang(str(tmp_path / "dir" / ".." / "nfs"))
        assert not mounts.may_hang(str(tmp_path / "nfsx"))  # a sibling named alike


def test_several_paths_hang_if_any_does(tmp_path: Path) -> None:
    """A claim's path and the home folder are asked about together: one remote is enough."""
    remote = tmp_path / "nfs"
    remote.mkdir()
    (tmp_path / "dir").mkdir()
    local = str(tmp_path / "dir" / "f.py")
    with table(tmp_path, remote) as mounts:
        assert not mounts.may_hang(local, str(tmp_path))
        assert mounts.may_hang(local, str(remote / "f.py"))
        assert mounts.may_hang(str(remote / "f.py"), local)


def test_no_mount_table_means_the_thread(tmp_path: Path) -> None:
    assert MountTable(str(tmp_path / "absent")).may_hang("/tmp/x")
    assert not MountTable(str(tmp_path / "absent")).all_local()


def test_all_local_only_without_a_network_or_fuse_mount(tmp_path: Path) -> None:
    """The daemon skips looking at paths only when nothing mounted can hang."""
    info = tmp_path / "local"
    info.write_text(LOCAL + "42 22 0:52 / /run/user/0 rw - tmpfs tmpfs rw\n")
    with MountTable(str(info)) as mounts:
        assert mounts.all_local()
    with table(tmp_path, tmp_path / "nfs") as mounts:
        assert not mounts.all_local()


def test_touched_paths() -> None:
    """What canonical_key would resolve: paths (and home), nothing for other kinds."""
    home = "/home/u"
    assert touched_paths("file:/p/a", home) == ["/p/a", home]
    assert touched_paths("/p/a", home) == ["/p/a", home]
    assert touched_paths("~/p", home) == ["/home/u/p", home]
    assert touched_paths("repo:/r", home) == ["/r", home]
    assert touched_paths("branch:/r:main", home) == ["/r", home]
    assert touched_paths("res:gpu", home) == []
    assert touched_paths("port:8080", home) == []
    assert touched_paths("memory", home) == []
    assert touched_paths("file:rel", home) is None
