"""``meshctl completion show|install [bash|zsh|fish]``: shell completion, installed once.

Completes commands, options, live session ids (``--session``, ``sessions show``,
``send``, ``sessions ask``, ``handoff request``), the keys the session holds
(``release``) and paths (``claim``, ``check``); session ids and keys come from the
running daemon (never started for it).

``install`` writes click's completion script where each shell loads it by itself:
bash ``~/.local/share/bash-completion/completions/meshctl`` (bash-completion ≥ 2
loads it on first use), zsh ``~/.zfunc/_meshctl`` (add ``fpath+=~/.zfunc`` before
``compinit`` in ``~/.zshrc``), fish ``~/.config/fish/completions/meshctl.fish``.
It writes no rc file; ``show`` prints the script for those who source it themselves
(with ``--json``, inside the one JSON document: ``{"shell", "script"}``).
"""

from __future__ import annotations

import os
from typing import Any

import click

from meshctl._core import env as _env
from meshctl.cli import _output
from meshctl.cli._context import common_options, get_state

SHELLS = ("bash", "zsh", "fish")


def _script(shell: str) -> str:
    from click.shell_completion import get_completion_class

    from meshctl.cli import cli

    cls = get_completion_class(shell)
    if cls is None:  # pragma: no cover - the three are built into click
        raise click.UsageError(f"no completion for {shell}")
    return str(cls(cli, {}, "meshctl", "_MESHCTL_COMPLETE").source())


def _target(shell: str) -> str:
    home = os.path.expanduser("~")
    data = _env.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
    config = _env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return {
        "bash": os.path.join(data, "bash-completion", "completions", "meshctl"),
        "zsh": os.path.join(home, ".zfunc", "_meshctl"),
        "fish": os.path.join(config, "fish", "completions", "meshctl.fish"),
    }[shell]


def _default_shell() -> str:
    name = os.path.basename(_env.get("SHELL", "bash"))
    return name if name in SHELLS else "bash"


shell_arg = click.argument("shell", required=False, type=click.Choice(SHELLS))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@common_options
def completion() -> None:
    """Shell completion for meshctl (commands, options, session ids, held keys, paths)."""


@completion.command()
@common_options
@shell_arg
def show(shell: str | None) -> None:
    """Print the completion script (default: your $SHELL).

    \b
    Examples:
      eval "$(meshctl completion show bash)"
    """
    state = get_state()
    shell = shell or _default_shell()
    script = _script(shell)
    if state.json:  # SPEC §9: one JSON document, the script inside it
        _output.emit(True, {"shell": shell, "script": script}, None)
        return
    click.echo(script, nl=False)


@completion.command()
@common_options
@shell_arg
def install(shell: str | None) -> None:
    """Write the completion script where your shell loads it (default: your $SHELL).

    \b
    Examples:
      meshctl completion install
      meshctl completion install zsh
    """
    state = get_state()
    shell = shell or _default_shell()
    path = _target(shell)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(_script(shell))
    doc: dict[str, Any] = {"shell": shell, "path": path}
    hint = {
        "bash": "open a new shell (needs the bash-completion package)",
        "zsh": "add `fpath+=~/.zfunc` before `compinit` in ~/.zshrc, then open a new shell",
        "fish": "open a new shell",
    }[shell]
    _output.emit(state.json, doc, f"wrote {path}; {hint}")
