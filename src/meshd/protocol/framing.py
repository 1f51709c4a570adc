"""Framing: one compact JSON value per line, ``\\n``-terminated (SPEC §3). Stdlib only.

The frame limit lives here, once, for the daemon and both clients: a frame of
:data:`MAX_FRAME` bytes (the newline not counted) is read; one byte more is refused
with ``-32600`` and the connection closed. Clients refuse it before sending.
"""

MAX_FRAME = 1024 * 1024
"""Largest frame accepted, in bytes, newline excluded."""

DELIMITER = b"\n"


def frame_too_large(size: int) -> bool:
    """Whether a frame of ``size`` bytes (newline excluded) is over the limit."""
    return size > MAX_FRAME
