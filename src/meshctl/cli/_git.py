"""Where a folder sits in git: top level, branch, worktree -- read from files, not ``git``.

``meshctl register`` reports ``repo``/``branch``/``worktree`` (SPEC §4) so that
listings say "branch feat/auth" and checks can match people working in the same
repository. Spawning ``git`` twice would cost more than the whole rest of the
command (BENCH.md), and the answer is in two small files: walk up to the first
``.git`` (a folder, or a file ``gitdir: …`` in a linked worktree), then read
``HEAD`` (``ref: refs/heads/NAME``; a detached HEAD has no branch).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


class GitPlace(NamedTuple):
    """A folder's repository facts; every field ``None`` outside git."""

    repo: str | None = None
    branch: str | None = None
    worktree: str | None = None


def _git_dir(top: Path) -> Path | None:
    dot_git = top / ".git"
    if dot_git.is_dir():
        return dot_git
    try:
        text = dot_git.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    gitdir = Path(text[len("gitdir:") :].strip())
    return gitdir if gitdir.is_absolute() else (top / gitdir).resolve()


def _branch(git_dir: Path) -> str | None:
    try:
        head = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    prefix = "ref: refs/heads/"
    return head[len(prefix) :] if head.startswith(prefix) else None


def git_place(cwd: str) -> GitPlace:
    """The repository, branch and (for a linked worktree) worktree that contain ``cwd``."""
    here = Path(cwd)
    for top in (here, *here.parents):
        if not (top / ".git").exists():
            continue
        git_dir = _git_dir(top)
        if git_dir is None:
            return GitPlace()
        linked = (top / ".git").is_file()
        return GitPlace(
            repo=str(top), branch=_branch(git_dir), worktree=str(top) if linked else None
        )
    return GitPlace()
