"""Which paths live on a filesystem that can hang: network and FUSE mounts.

Making a path key canonical (``realpath``) reads the filesystem. On a local disk
that takes microseconds and cannot hang, so the daemon does it inline; on NFS,
SMB, Ceph, 9p or any FUSE filesystem a dead server blocks it forever, so such
paths go to the resolver thread (:mod:`meshd.resolver`). :func:`may_hang` decides
by walking the path as ``realpath`` would -- every component and every symlink
target is looked up in the mount table *before* it is touched -- so a local
symlink into a network mount is caught too. Anything unusual (``..``, deep or
looping links) is sent to the thread, which is always safe, only slower.

The mount table comes from ``/proc/self/mountinfo``, read again only when the
kernel says it changed (``POLLPRI`` on the open file): a poll(0) per look-up.
Where there is no such file (not Linux) every path goes to the thread.
"""

from __future__ import annotations

import functools
import io
import os
import select
import stat

REMOTE_TYPES = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "9p", "ceph", "glusterfs", "afs",
    "lustre", "gpfs", "davfs", "coda", "ocfs2", "gfs2", "beegfs", "cvmfs",
})  # fmt: skip
"""Filesystem types whose look-ups can block on a server (plus every ``fuse*``)."""

_MAX_LINKS = 40


def remote_type(fstype: str) -> bool:
    return fstype in REMOTE_TYPES or fstype.startswith("fuse")


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> dict[str, bool]:
    """Mount point -> whether its filesystem may hang (the last mount on a point wins)."""
    table: dict[str, bool] = {}
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right:
            continue
        table[_unescape(fields[4])] = remote_type(right.split()[0])
    return table


class MountTable:
    """The mount points that may hang, kept current with the kernel's change signal."""

    def __init__(self, path: str = "/proc/self/mountinfo") -> None:
        self._remote: list[str] = []  # mount points on remote/FUSE filesystems, sorted
        self._all: dict[str, bool] = {}
        self._file: io.BufferedReader | None
        try:
            self._file = open(path, "rb")  # noqa: SIM115  # kept open: poll()ed for changes
        except OSError:
            self._file = None
            return
        self._poll = select.poll()
        self._poll.register(self._file.fileno(), select.POLLPRI | select.POLLERR)
        self._read()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> MountTable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self) -> None:
        assert self._file is not None
        self._file.seek(0)
        self._all = parse_mountinfo(self._file.read().decode("utf-8", "surrogateescape"))
        self._remote = sorted(p for p, remote in self._all.items() if remote)

    def _fresh(self) -> bool:
        """Re-read the table if it changed; False when there is none to go by."""
        if self._file is None:
            return False
        if self._poll.poll(0):
            self._read()
        return True

    def remote(self, path: str) -> bool:
        """Whether ``path`` (absolute, normalised) is on or under a remote/FUSE mount."""
        for point in self._remote:  # a handful at most
            if path == point or path.startswith(point.rstrip("/") + "/"):
                return True
        return False

    def all_local(self) -> bool:
        """Whether no mounted filesystem can hang: the table is current and lists no
        network or FUSE mount (the usual machine). Then no path needs looking at."""
        return self._fresh() and not self._remote

    def may_hang(self, *paths: str) -> bool:
        """Whether resolving any of ``paths`` (absolute) may touch a filesystem that can
        hang. The table is checked for changes once for all of them (a claim names its
        path and the home folder: one ``poll`` a request, not two)."""
        if not self._fresh():
            return True
        if not self._remote:
            return False
        try:
            return any(self._walk(path, 0) for path in paths)
        except OSError:
            return True

    def _walk(self, path: str, links: int) -> bool:
        """Follow ``path`` as realpath does, checking each step before touching it."""
        if links > _MAX_LINKS or not path.startswith("/"):
            return True
        done = "/"
        if self.remote(done):
            return True
        for name in path.split("/"):
            if name in ("", "."):
                continue
            if name == "..":
                return True  # realpath's handling of .. after links: leave it to the thread
            nxt = done.rstrip("/") + "/" + name
            if self.remote(nxt):
                return True
            try:
                st = os.lstat(nxt)
            except FileNotFoundError:
                done = nxt  # the rest does not exist: realpath touches nothing remote below
                continue
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(nxt)
                target = target if target.startswith("/") else done.rstrip("/") + "/" + target
                if self._walk(target, links + 1):
                    return True
                done = os.path.realpath(nxt)  # local all the way: safe, and exact
            else:
                done = nxt
        return False


@functools.cache
def process_table() -> MountTable:
    """The process's own table, opened once and kept for its lifetime."""
    return MountTable()
