"""``meshctl mcp``: a Model Context Protocol server that puts any MCP-capable agent on the mesh.

:mod:`.server` is the only module that imports the ``mcp`` SDK (the optional extra
``session-mesh[mcp]``); :mod:`._session` is the mesh session the server is, and the
context the shared tool handlers (:mod:`meshctl.agent`) run with. docs/MCP.md says
how to add the server to an agent and what its model sees.
"""
