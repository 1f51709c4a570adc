"""meshctl._paths (standard library) resolves what meshd.paths (platformdirs) does."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshctl import _paths
from meshd import paths as daemon_paths
from meshd.protocol import contract

ENV = ("MESH_SOCKET", "MESH_STATE_DIR", "XDG_RUNTIME_DIR", "XDG_STATE_HOME")


@pytest.fixture
def base(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short private temp dir; every variable that steers paths cleared."""
    d = Path(tempfile.mkdtemp(prefix="pa-", dir="/tmp"))
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def agree(profile: str = "default") -> Path:
    ours, theirs = _paths.socket_path(profile), daemon_paths.socket_path(profile)
    assert ours == theirs
    assert _paths.state_dir() == daemon_paths.state_dir()
    return ours


class TestAgree:
    def test_valid_runtime_dir(self, base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A 0700 XDG_RUNTIME_DIR of ours is used."""
        run = base / "run"
        run.mkdir(mode=0o700)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))

        assert agree("p1") == run / "meshd" / "p1.sock"

    def test_missing_runtime_dir_is_accepted(
        self, base: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A runtime dir that does not exist yet passes (it would be created 0700)."""
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(base / "later"))

        assert agree() == base / "later" / "meshd" / "default.sock"

    def test_unset(self, base: Path) -> None:
        """Without XDG_RUNTIME_DIR (cron), both fall back to the same place."""
        assert agree().name == "default.sock"

    @pytest.mark.parametrize("mode", [0o755, 0o750, 0o777])
    def test_wrong_mode(self, base: Path, monkeypatch: pytest.MonkeyPatch, mode: int) -> None:
        """A runtime dir with another mode than 0700 is refused by both."""
        run = base / "run"
        run.mkdir()
        run.chmod(mode)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))

        assert run not in agree().parents

    def test_symlink(self, base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A symlinked runtime dir is refused by both."""
        real = base / "real"
        real.mkdir(mode=0o700)
        (base / "link").symlink_to(real)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(base / "link"))

        assert base not in agree().parents

    def test_relative(self, base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A relative XDG_RUNTIME_DIR is ignored by both."""
        monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/run")

        agree()

    def test_unsafe_parent(self, base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A 0700 dir below a world-writable, non-sticky parent is refused by both."""
        parent = base / "open"
        parent.mkdir()
        parent.chmod(0o777)
        (parent / "run").mkdir(mode=0o700)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(parent / "run"))

        assert parent not in agree().parents

    def test_mesh_socket(self, base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """MESH_SOCKET wins over everything."""
        monkeypatch.setenv("MESH_SOCKET", str(base / "s.sock"))

        assert agree() == base / "s.sock"

    def test_mesh_state_dir(self, base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """MESH_STATE_DIR names the state folder."""
        monkeypatch.setenv("MESH_STATE_DIR", str(base / "st"))

        agree()
        assert _paths.state_dir() == base / "st"

    def test_xdg_state_home(self, base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """XDG_STATE_HOME/meshd is the state folder when MESH_STATE_DIR is unset."""
        monkeypatch.setenv("XDG_STATE_HOME", str(base / "xs"))

        agree()
        assert _paths.state_dir() == base / "xs" / "meshd"

    def test_home_default(self, base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """With nothing set, both use ~/.local/state/meshd."""
        monkeypatch.setenv("HOME", str(base))

        agree()
        assert _paths.state_dir() == base / ".local" / "state" / "meshd"


class TestRecordedSocket:
    def test_reads_first_line(self, base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """The daemon's one-line record is read back as a path."""
        monkeypatch.setenv("MESH_STATE_DIR", str(base))
        (base / "p.socket").write_text(f"{base}/x.sock\n")

        assert _paths.recorded_socket("p") == base / "x.sock"

    @pytest.mark.parametrize("text", [None, "", "relative.sock\n"])
    def test_absent_or_unusable(
        self, base: Path, monkeypatch: pytest.MonkeyPatch, text: str | None
    ) -> None:
        """No record, an empty one or a relative path give None."""
        monkeypatch.setenv("MESH_STATE_DIR", str(base))
        if text is not None:
            (base / "p.socket").write_text(text)

        assert _paths.recorded_socket("p") is None


@pytest.mark.parametrize("name", ["", ".", "..", "a b", "x" * 65, "a/b"])
def test_bad_profile_names_refused(name: str) -> None:
    """Profile names follow SPEC §2 on the client side too."""
    with pytest.raises(ValueError, match="invalid profile name"):
        contract.check_profile(name)
    assert os.sep not in contract.check_profile("a-b_c.1")
