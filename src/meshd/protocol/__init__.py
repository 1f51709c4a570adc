"""The wire contract shared by daemon and clients.

Modules here that the blocking client imports (``errors``, ``framing``) use the
standard library only; ``jsonrpc`` and ``methods`` use msgspec and are imported
by the daemon alone.
"""
