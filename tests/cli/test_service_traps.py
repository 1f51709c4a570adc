"""``meshctl service install`` never writes through a link it did not make.

Before, the unit was written to ``meshd@.service.tmp`` with a plain open and renamed
over the unit: with that name a symlink, the text went to the symlink's target (any
file the user can write) and the unit became the symlink. Now temporary files are
created ``O_CREAT|O_EXCL|O_NOFOLLOW`` under unguessable names in the target folder,
and a symlink (or any foreign file) at a unit's or plist's final name is refused with
its path.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.cli.conftest import Meshctl
from tests.cli.test_service import svc_env, unit_dir

__all__ = ["svc_env"]  # the fixture, shared


def test_a_planted_tmp_symlink_is_never_written_through(
    meshctl: Meshctl, svc_env: dict[str, str], short_tmp: Path
) -> None:
    folder = unit_dir(svc_env)
    folder.mkdir(parents=True)
    victim = short_tmp / "victim.txt"
    victim.write_text("precious\n")
    for name in ("meshd@.service", "meshd@.socket"):
        (folder / f"{name}.tmp").symlink_to(victim)

    r = meshctl("service", "install", "--json", env=svc_env)

    assert r.code == 0, r
    assert victim.read_text() == "precious\n"
    for name in ("meshd@.service", "meshd@.socket"):
        unit = folder / name
        assert not unit.is_symlink()
        assert unit.read_text().startswith("# Managed by meshctl service install")
        assert (folder / f"{name}.tmp").is_symlink()  # left as found, never followed
    assert sorted(p.name for p in folder.iterdir() if not p.name.endswith((".tmp", ".d"))) == [
        "meshd@.service",
        "meshd@.socket",
    ]


@pytest.mark.parametrize("target", ["managed", "foreign", "dangling"])
def test_a_symlink_at_the_units_name_is_refused_with_its_path(
    meshctl: Meshctl, svc_env: dict[str, str], short_tmp: Path, target: str
) -> None:
    """Even a link to a file that carries our marker: meshctl never writes a link, so
    one there is someone else's, and the file it points to stays as it is."""
    folder = unit_dir(svc_env)
    folder.mkdir(parents=True)
    there = short_tmp / "elsewhere.service"
    if target == "managed":
        there.write_text("# Managed by meshctl service install (session-mesh 0.0.1)\n")
    elif target == "foreign":
        there.write_text("[Service]\nExecStart=/bin/mine\n")
    before = there.read_text() if there.exists() else None
    unit = folder / "meshd@.service"
    unit.symlink_to(there)

    r = meshctl("service", "install", "--json", env=svc_env)

    assert r.code == 1, r
    assert r.json()["error"]["data"]["code"] == "SERVICE_REFUSED"
    assert f"{unit} is a symbolic link (to {there})" in r.err
    assert unit.is_symlink()
    assert (there.read_text() if there.exists() else None) == before
    assert not (folder / "meshd@.socket").exists()


def test_a_plist_symlink_is_refused_with_its_path(
    meshctl: Meshctl, svc_env: dict[str, str], short_tmp: Path
) -> None:
    agents = Path(svc_env["HOME"]) / "Library" / "LaunchAgents"
    agents.mkdir(parents=True)
    victim = short_tmp / "victim.plist"
    victim.write_text("<!-- Managed by meshctl service install -->\n")
    plist = agents / "org.sessionmesh.meshd.work.plist"
    plist.symlink_to(victim)

    r = meshctl("service", "install", "--launchd", "--profile", "work", env=svc_env)

    assert r.code == 1, r
    assert f"{plist} is a symbolic link" in r.err
    assert victim.read_text() == "<!-- Managed by meshctl service install -->\n"


def test_a_named_pipe_at_the_units_name_is_refused_without_blocking(
    meshctl: Meshctl, svc_env: dict[str, str]
) -> None:
    folder = unit_dir(svc_env)
    folder.mkdir(parents=True)
    os.mkfifo(folder / "meshd@.service")

    r = meshctl("service", "install", env=svc_env)  # run_meshctl gives up after 60 s

    assert r.code == 1, r
    assert f"{folder / 'meshd@.service'} exists and was not written by meshctl" in r.err


def test_uninstall_leaves_a_symlink_alone(
    meshctl: Meshctl, svc_env: dict[str, str], short_tmp: Path
) -> None:
    """A link at the unit's name is never removed, even one to a file we wrote."""
    assert meshctl("service", "install", env=svc_env).code == 0
    folder = unit_dir(svc_env)
    kept = short_tmp / "kept.service"
    os.replace(folder / "meshd@.service", kept)
    (folder / "meshd@.service").symlink_to(kept)

    r = meshctl("service", "uninstall", "--json", env=svc_env)

    assert r.code == 0, r
    assert (folder / "meshd@.service").is_symlink()
    assert kept.exists()
    assert any("left" in n and "meshd@.service" in n for n in r.json()["notes"])
