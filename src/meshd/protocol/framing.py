"""Framing: one compact JSON value per line, ``\\n``-terminated (SPEC §3). Stdlib only."""

MAX_FRAME = 1024 * 1024
"""Largest frame accepted, newline excluded. Longer: ``-32600`` and the connection closes."""

DELIMITER = b"\n"
