"""Who may be trusted at the other end of the socket (docs/SECURITY.md).

The boundary is the uid (SPEC §4): processes of the daemon's user are cooperative,
every other uid is hostile. Both sides of the socket apply the same two rules, so
they live here, in one place, with the standard library only (the blocking client
imports this module):

* **The folder** holding a socket is a real directory (not a symlink), owned by the
  user, with no permission for anyone else (mode 0700). The daemon refuses to bind
  in any other folder; a client refuses to connect through one. In such a folder
  no other uid can put, replace or remove a socket.
* **The peer**: the daemon reads the uid of every connecting process
  (``SO_PEERCRED``) and refuses a foreign one with ``FORBIDDEN``; a client reads
  the uid of the process listening at the socket it reached, before sending a
  byte, and refuses a daemon run by another user. The kernel records the
  listener's credentials at ``listen()``, so a folder swapped between the check
  and the ``connect`` is still caught.
"""

from __future__ import annotations

import _socket  # not socket: its enums and selectors cost a client's start-up
import os
import stat
import sys


def peer_credentials(sock: _socket.socket) -> tuple[int | None, int]:
    """(pid, uid) of the process at the other end of a connected Unix socket.

    For a client's socket this is the process that called ``listen()``.
    """
    if hasattr(_socket, "SO_PEERCRED"):
        raw = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)  # struct ucred
        order = sys.byteorder  # three native ints; not struct: a client's start-up pays it
        pid = int.from_bytes(raw[0:4], order, signed=True)
        return pid, int.from_bytes(raw[4:8], order, signed=True)
    if sys.platform == "darwin":  # struct xucred: u_int cr_version; uid_t cr_uid; ...
        raw = sock.getsockopt(0, getattr(_socket, "LOCAL_PEERCRED", 1), 76)
        uid = int.from_bytes(raw[4:8], sys.byteorder, signed=True)
        return None, uid
    raise OSError("cannot read peer credentials on this platform")


def who(uid: int) -> str:
    """``uid 1001 (bob)``: a uid with its user name when it has one."""
    import pwd  # only on the refusal path

    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def folder_problem(path: str, uid: int | None = None) -> str | None:
    """Why ``path`` is not a private folder of ``uid`` (default: ours), or None if it is.

    One sentence that names the folder and says what to do. Raises
    ``FileNotFoundError`` when nothing is there (the caller decides whether to create it).
    """
    me = os.geteuid() if uid is None else uid
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        # No chmod hint: the target may be a shared folder such as /tmp.
        return (
            f"the socket folder {path} is a symlink (to {os.readlink(path)}), which could "
            "lead anywhere: use a real folder of your own with mode 0700 (set MESH_SOCKET "
            "to a path inside one)"
        )
    if not stat.S_ISDIR(info.st_mode):
        return f"the socket folder {path} is not a folder: remove it, or set MESH_SOCKET"
    if info.st_uid != me:
        return (
            f"the socket folder {path} is owned by {who(info.st_uid)}, not by you "
            f"({who(me)}): use a folder of your own (set MESH_SOCKET to a path inside one)"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        return (
            f"the socket folder {path} has mode {mode:04o}, open to other users: "
            f"run chmod 0700 '{path}'"
        )
    return None


def peer_problem(sock: _socket.socket, path: str) -> str | None:
    """Why the daemon reached through ``sock`` is not to be trusted, or None.

    A daemon of another user could be a fake one collecting tasks, paths and
    messages, and answering with grants it never made.
    """
    pid, uid = peer_credentials(sock)
    me = os.geteuid()
    if uid == me:
        return None
    run_by = f"pid {pid}, {who(uid)}" if pid else who(uid)
    return (
        f"the process listening at {path} ({run_by}) is not run by you ({who(me)}); "
        "refusing to talk to it: remove that socket, or set MESH_SOCKET to a socket in a "
        "folder of your own"
    )


def check_absolute(path: str, name: str = "MESH_SOCKET", what: str = "socket") -> str:
    """Return ``path`` if it is absolute and valid UTF-8, else raise ``ValueError``
    naming ``name``.

    A relative socket path means a different socket in every working folder (and
    ``/`` for a daemon started in the background); the same holds for the state
    folder and the config file (``what`` names which).
    """
    if not os.path.isabs(path):
        raise ValueError(
            f"{name} must be an absolute path, not {path!r} (a relative path names a "
            f"different {what} from every working folder)"
        )
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        # Bytes that are not UTF-8 (read with surrogateescape): the daemon writes the
        # socket's path into the state folder and reports its paths in UTF-8 JSON, and
        # SQLite takes its file name as UTF-8; each failed with a traceback at start.
        from meshd.protocol.contract import escaped

        raise ValueError(
            f"{name} is not valid UTF-8: '{escaped(path)}' (the {what}'s path is "
            "recorded and reported as text); choose a path whose name is UTF-8"
        ) from None
    return path


#: The overrides besides ``MESH_SOCKET`` that name a path, and what each names.
PATH_VARS = {"MESH_STATE_DIR": "state folder", "MESH_CONFIG": "config file"}


def env_path_problem() -> str | None:
    """Why ``MESH_STATE_DIR`` or ``MESH_CONFIG`` cannot be used (relative, or not
    UTF-8), or None.

    A relative one splits a profile in two: meshctl resolves it against its own
    working folder (its spawn lock, the log it reads, the config doctor checks), the
    daemon it starts against ``/`` (the database, the config it loads).
    """
    for name, what in PATH_VARS.items():
        value = os.environ.get(name)
        if value:
            try:
                check_absolute(value, name, what)
            except ValueError as exc:
                return str(exc)
    return None
