"""Where a folder sits in git: top level, branch, worktree -- read from files, not ``git``.

``meshctl register`` reports ``repo``/``branch``/``worktree`` (SPEC §4) so that
listings say "branch feat/auth" and checks can match people working in the same
repository. Spawning ``git`` twice would cost more than the whole rest of the
command (BENCH.md), and the answer is in two small files: walk up to the first
``.git`` (a folder, or a file ``gitdir: …`` in a linked worktree), then read
``HEAD`` (``ref: refs/heads/NAME``; a detached HEAD has no branch).

Plain ``os.path`` on strings, not :mod:`pathlib`, whose import (``urllib.parse``,
``ipaddress`` …) would cost more than this whole walk.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from typing import NamedTuple

    class GitPlace(NamedTuple):
        """A folder's repository facts; every field ``None`` outside git."""

        repo: str | None = None
        branch: str | None = None
        worktree: str | None = None

else:

    class GitPlace(tuple):
        """A folder's repository facts; every field ``None`` outside git.

        The tuple ``namedtuple`` would make, written out: ``collections`` (and
        ``typing``) are start-up time for ``meshctl register``, which runs this.
        """

        __slots__ = ()

        def __new__(cls, repo=None, branch=None, worktree=None):
            return tuple.__new__(cls, (repo, branch, worktree))

        repo = property(lambda self: self[0], doc="the repository's top folder")
        branch = property(lambda self: self[1], doc="the checked-out branch")
        worktree = property(lambda self: self[2], doc="a linked worktree's folder")

        def __repr__(self) -> str:
            return f"GitPlace(repo={self[0]!r}, branch={self[1]!r}, worktree={self[2]!r})"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _git_dir(top: str) -> str | None:
    dot_git = os.path.join(top, ".git")
    if os.path.isdir(dot_git):
        return dot_git
    text = _read(dot_git)
    if text is None or not text.startswith("gitdir:"):
        return None
    gitdir = text[len("gitdir:") :].strip()
    return gitdir if os.path.isabs(gitdir) else os.path.realpath(os.path.join(top, gitdir))


def _branch(git_dir: str) -> str | None:
    head = _read(os.path.join(git_dir, "HEAD"))
    prefix = "ref: refs/heads/"
    return head[len(prefix) :] if head is not None and head.startswith(prefix) else None


def git_place(cwd: str) -> GitPlace:
    """The repository, branch and (for a linked worktree) worktree that contain ``cwd``."""
    top = os.path.normpath(cwd)
    while True:
        dot_git = os.path.join(top, ".git")
        if os.path.exists(dot_git):
            git_dir = _git_dir(top)
            if git_dir is None:
                return GitPlace()
            linked = os.path.isfile(dot_git)
            return GitPlace(repo=top, branch=_branch(git_dir), worktree=top if linked else None)
        parent = os.path.dirname(top)
        if parent == top:
            return GitPlace()
        top = parent
