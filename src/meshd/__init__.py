"""Session Mesh daemon package.

Kept to the version string so that ``import meshd`` (done by ``meshctl`` for the
shared protocol leaf) costs nothing.
"""

__version__ = "0.1.0"
PROTOCOL_VERSION = "1.0"
