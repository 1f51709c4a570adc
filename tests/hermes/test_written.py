"""The paths a write or read names are the same strings whichever way they are worked out.

:func:`meshctl.hermes._common.absolute` skips the working folder for an absolute path
and the normalisation for a path that is normal already (both ran on every write);
what it returns must be what ``normpath(join(cwd, expanduser(path)))`` returned.
"""

from __future__ import annotations

import itertools
import os

import pytest

from meshctl.hermes._common import absolute, written_paths
from meshctl.hermes._reads import read_path

PARTS = ["", "/", "//", "///", ".", "..", "a", ".hidden", "b.py", "~", "~/x", "x/", "é"]


def old_way(path: str, base: str) -> str:
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))


@pytest.mark.parametrize("base", ["/home/me/proj", "/", "/home/me/proj/"])
def test_absolute_is_normpath_of_the_join(base: str) -> None:
    for n in (1, 2, 3):
        for parts in itertools.product(PARTS, repeat=n):
            path = "/".join(parts)
            if not path:
                continue
            assert absolute(path, base) == old_way(path, base), repr(path)


def test_a_relative_path_is_taken_from_the_terminal_folder_and_an_absolute_one_as_is(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
) -> None:
    monkeypatch.setenv("TERMINAL_CWD", str(tmp_path))
    patch = "*** Begin Patch\n*** Update File: src/a.py\n*** Add File: /etc/../tmp/b.py\n"

    assert written_paths("write_file", {"path": "src/a.py"}) == [f"{tmp_path}/src/a.py"]
    assert written_paths("patch", {"patch": patch}) == [f"{tmp_path}/src/a.py", "/tmp/b.py"]
    assert written_paths("write_file", {"path": "/srv/x.py"}) == ["/srv/x.py"]
    assert read_path("read_file", {"path": "../c.py"}) == os.path.normpath(f"{tmp_path}/../c.py")
    assert written_paths("terminal", {"command": "ls"}) == []
