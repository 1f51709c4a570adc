"""One definition of each small contract rule, shared by the daemon and the clients."""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from pathlib import Path

import click
import pytest

from meshctl.cli import _context, _output
from meshd import paths as daemon_paths
from meshd.protocol import contract, framing

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.mark.parametrize("ts", [0.0, 1_764_500_000.0, 1_764_500_000.999, 1_764_503_599.5])
def test_rfc3339_is_utc_to_the_second(ts: float) -> None:
    """The cached formatter writes what datetime writes (the copy it replaced)."""
    expected = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert contract.rfc3339(ts) == expected


@pytest.mark.parametrize("name", ["", "a b", "..", ".", "x" * 65, "a/b", "é"])
def test_every_side_refuses_the_same_profile_names(name: str) -> None:
    """The client library, the CLI and the daemon apply one rule."""
    with pytest.raises(ValueError, match="invalid profile name"):
        contract.check_profile(name)
    with pytest.raises(daemon_paths.PathError, match="invalid profile name"):
        daemon_paths.check_profile(name)
    assert name in {".", ".."} or not contract.PROFILE_RE.match(name)


def test_cli_option_uses_the_contract_rule() -> None:
    """``--profile`` is checked with the contract's pattern, not a copy of it."""
    state = _context.State()
    ctx = click.Context(click.Command("x"), obj=state)
    param = click.Option(["--profile"])
    with ctx, pytest.raises(click.BadParameter):
        _context._store("profile")(ctx, param, "a b")


def test_labels_and_tilde() -> None:
    assert contract.label("cli:1") == "[from cli:1 — another session of yours, not you]"
    assert "mesh daemon" in contract.label(contract.DAEMON_SENDER)
    assert contract.tilde("/home/u/p", "/home/u") == "~/p"
    assert contract.tilde("/home/uu/p", "/home/u") == "/home/uu/p"
    assert _output.tilde(None, "/home/u") is None


def _literals(path: Path) -> set[str]:
    return {
        node.value
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_no_copies_left() -> None:
    """Outside the contract module no source spells the profile pattern for profiles,
    formats RFC 3339 times itself, or defines its own frame limit."""
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.name in {"contract.py", "framing.py"}:
            continue
        text = path.read_text(encoding="utf-8")
        if "PROFILE_RE = " in text or "MAX_FRAME = " in text or "MAX_FRAME: " in text:
            offenders.append(str(path))
        if "time.gmtime" in text and "%Y-%m-%dT%H:%M:%SZ" in _literals(path):
            offenders.append(str(path))
    assert offenders == []


def test_the_frame_limit_counts_no_newline() -> None:
    assert framing.frame_too_large(framing.MAX_FRAME + 1)
    assert not framing.frame_too_large(framing.MAX_FRAME)


def test_one_list_of_reported_fields() -> None:
    """A session's reported fields are spelled once (contract.REPORTED): the daemon's
    Report is exactly them, and the params and the session record carry each."""
    from meshd.core.sessions.records import Report, Session
    from meshd.protocol.methods import HeartbeatParams, RegisterParams

    assert Report.__struct_fields__ == contract.REPORTED
    assert set(contract.REPORTED) <= set(HeartbeatParams.__struct_fields__)
    assert set(contract.REPORTED) <= set(Session.__struct_fields__)
    assert set(contract.REPORTED) - {"activity"} <= set(RegisterParams.__struct_fields__)
    assert set(contract.REPORTED_PATHS) <= set(contract.REPORTED)
