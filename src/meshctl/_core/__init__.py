"""The client's sans-I/O core: what both drivers decide, with no socket and no clock of its own.

- :mod:`meshctl._core.session`: the session policy -- registration params, claim
  bookkeeping, what was lost and the sentence for it, fail-open with backoff, the
  heartbeat rhythm;
- :mod:`meshctl._core.messaging`: each message, query, broadcast and handoff call as
  a :class:`~meshctl._core.messaging.Call` (method, params, how to read the reply,
  what a no-op returns) and the typed records that come back;
- :mod:`meshctl._core.shared`: the records and params of notes, signals and the ledger;
- :mod:`meshctl._core.abc`: ``Target``, what a connection of its own copies of its
  client (typing only).

The drivers around it: :mod:`meshctl._async` (anyio, written by hand) and
:mod:`meshctl._sync` (blocking; its session layer generated from the async one by
``scripts/unasync.py``). Standard library only: the blocking client and the Hermes
plugin's vendored copy import it.
"""
