"""The pure, synchronous heart of the daemon: no I/O, no anyio, no sqlite3.

Every function here runs to completion without blocking; time comes from an
injected :class:`~meshd.core.clock.Clock`, so expiry is tested without sleeping.
"""
