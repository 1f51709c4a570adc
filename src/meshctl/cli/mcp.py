"""``meshctl mcp``: serve the mesh tools to an agent over MCP (stdio).

The agent starts it (its MCP configuration names ``meshctl mcp``) and talks to it on
stdin/stdout; the server is one mesh session for as long as it runs. The ``mcp``
package comes with the extra: ``pip install 'session-mesh[mcp]'``.
"""

from __future__ import annotations

import click

from meshctl.cli import _output
from meshctl.cli._context import common_options, get_state


@click.command()
@click.option("--source", default="mcp", show_default=True, metavar="NAME",
              help="The session's source (claude-code: share the Claude Code session "
              "its hooks register).")  # fmt: skip
@click.option("--task", default="", metavar="TEXT", help="What the agent works on.")
@click.option("--cwd", "cwd", metavar="DIR", type=click.Path(exists=True, file_okay=False),
              help="The session's folder (default: where the server starts).")  # fmt: skip
@click.option("--full", is_flag=True, help="Every mesh tool, not the compact set.")
@common_options
def mcp(source: str, task: str, cwd: str | None, full: bool) -> None:
    """Serve the mesh tools over MCP on stdin/stdout (one server = one mesh session).

    \b
    Examples:
      meshctl mcp
      meshctl mcp --source codex --task "release notes"
    """
    state = get_state()
    try:
        from meshctl.mcp.server import serve
    except ImportError as exc:
        raise _output.Failure(
            f"meshctl mcp needs the mcp package ({exc}): pip install 'session-mesh[mcp]'",
            "MCP_MISSING",
        ) from exc
    mode = "full" if full else "compact"
    serve(source, task, mode, profile=state.profile, socket=state.socket, cwd=cwd)
