"""The blocking connection, under the name the generated modules use.

:class:`~meshctl._blocking.Connection` is hand-written (standard library only) and
lives in :mod:`meshctl._blocking`, where the CLI and the Hermes plugin import it;
the blocking twins of the async layer (generated from ``meshctl/_async/``, whose
``connection.py`` holds ``AsyncConnection``) name it through this module.
"""

from meshctl._blocking import Connection

__all__ = ["Connection"]
