"""Claude Code on the mesh: the hooks ``meshctl claude install`` puts in its settings.

:mod:`.hook` is the one entry point every hook runs (``python -S …/hook.py``): a
process of its own per event, standard library only, so it stays within the cost of
a one-request script (docs/CLAUDE-CODE.md has the figures). The session it reports
is the Claude Code process's (:func:`.hook.agent_pid`), which the MCP server
``meshctl mcp --source claude-code`` shares, so the model's mesh tools act as it.
"""
