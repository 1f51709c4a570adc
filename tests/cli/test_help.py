"""`meshctl --help` lists every command with its whole summary."""

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
    runs that very command."""
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


def _example_args(line: str, command: str) -> list[str]:
    """The arguments an example line gives ``command``, up to the first shell operator
    (``)``, ``|``, ``&&``, ``;``) or comment: what follows belongs to the shell."""
    import shlex

    lexer = shlex.shlex(line[line.index(command) + len(command) :], posix=True,
                        punctuation_chars=True)  # fmt: skip
    lexer.whitespace_split = True
    args = []
    for token in lexer:
        if token and set(token) <= set("();&|<>"):
            break
        args.append(token)
    return args


def test_every_example_parses() -> None:
    """Each example runs a command with options and arguments it really takes: click
    parses it without a usage error (nothing is run)."""
    from meshctl.cli import cli

    root = click.Context(cli, info_name="meshctl")
    checked = 0
    for words, text in _leaves(cli, root):
        command = " ".join(["meshctl", *words])
        examples = text.partition("Examples:")[2].split("Options:")[0]
        for line in (x.strip() for x in examples.splitlines()):
            if command not in line:
                continue
            ctx = root
            for word in words[:-1]:
                group = ctx.command
                assert isinstance(group, click.Group)
                sub = group.get_command(ctx, word)
                assert sub is not None
                ctx = click.Context(sub, info_name=word, parent=ctx)
            group = ctx.command
            assert isinstance(group, click.Group)
            leaf = group.get_command(ctx, words[-1])
            assert leaf is not None
            try:
                leaf.make_context(words[-1], _example_args(line, command), parent=ctx)
            except click.ClickException as exc:
                raise AssertionError(f"{line!r}: {exc.format_message()}") from exc
            checked += 1
    assert checked > 60
