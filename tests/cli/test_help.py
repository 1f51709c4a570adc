"""`meshctl --help` lists every command with its whole summary (issue 15.6)."""

from __future__ import annotations

from collections.abc import Iterator

import click
from tests.cli.conftest import Meshctl


def test_summaries_are_not_cut_off(meshctl: Meshctl) -> None:
    r = meshctl("--help")

    assert r.code == 0, r
    commands = r.out.split("Commands:", 1)[1]
    assert "..." not in commands
    assert "claim " in commands
    assert "Session Mesh plugin into Hermes Agent profiles" in commands


def _leaves(group: click.Group, ctx: click.Context) -> Iterator[tuple[list[str], str]]:
    """Every leaf command under ``group``: its words and its whole ``--help`` text."""
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        sub = click.Context(cmd, info_name=name, parent=ctx)
        if isinstance(cmd, click.Group):
            for words, text in _leaves(cmd, sub):
                yield [name, *words], text
        else:
            yield [name], cmd.get_help(sub)


def test_every_command_shows_a_real_example() -> None:
    """Each leaf command's help has an Examples section with at least one line that
    runs that very command (issue 15.6)."""
    from meshctl.cli import cli

    root = click.Context(cli, info_name="meshctl")
    missing = []
    leaves = list(_leaves(cli, root))
    for words, text in leaves:
        _, _, examples = text.partition("Examples:")
        runs = [line.strip() for line in examples.split("Options:")[0].splitlines()]
        if not any(" ".join(["meshctl", *words]) in line for line in runs):
            missing.append(" ".join(words))

    assert len(leaves) > 40
    assert missing == []
