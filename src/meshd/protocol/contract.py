"""Small rules of the contract that the daemon and the clients share, standard library only.

One definition each, imported by both sides instead of kept as copies:
the profile-name rule (SPEC §2), a session's reported fields (SPEC §4), how times are
written (RFC 3339, UTC, to the second), the frame in front of another session's words
(SPEC §6 Safety) and the home folder written as ``~``. The frame limit lives in
:mod:`meshd.protocol.framing`, the error tree in :mod:`meshd.protocol.errors`, the
trust rules in :mod:`meshd.protocol.trust`. The blocking client and the Hermes plugin
carry this module, so it imports nothing but the standard library.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False  # not typing's: the clients import this module on every command
if TYPE_CHECKING:
    import re

    PROFILE_RE: re.Pattern[str]
    """Profile names: 1-64 characters from A-Z a-z 0-9 _ . - (SPEC §2)."""

#: The profile-name rule (SPEC §2). ``PROFILE_RE`` is compiled from it on first use
#: (module ``__getattr__``): ``re`` and a compile are start-up time for every client
#: command, which checks a name with :func:`is_profile` instead.
_PROFILE = r"\A[A-Za-z0-9_.-]{1,64}\Z"
_PROFILE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def __getattr__(name: str) -> object:
    if name == "PROFILE_RE":
        import re

        pattern = globals()["PROFILE_RE"] = re.compile(_PROFILE)
        return pattern
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_profile(name: str) -> bool:
    """Whether ``name`` is a profile name the mesh accepts: ``PROFILE_RE`` (1-64
    characters from the set, nothing after them: not even the newline ``$`` would let
    through, which named a socket ``nl\\n.sock``), and neither ``.`` nor ``..``, which
    name folders, not profiles. The one test every side applies (CLI option, fast path,
    config tables, :func:`check_profile`)."""
    return 0 < len(name) <= 64 and _PROFILE_CHARS.issuperset(name) and name not in {".", ".."}


DAEMON_SENDER = "meshd"
"""The sender of the daemon's own notices."""
REPORTED = ("status", "task", "cwd", "repo", "branch", "worktree", "tools", "activity")
"""A session's reported fields: what it says about itself, which any heartbeat may
change (SPEC §4). All but ``activity`` are registration fields too. The one list the
daemon's ``Report`` and ``HeartbeatParams``, the registry and both clients follow."""
REPORTED_PATHS = ("cwd", "repo", "worktree")
"""The reported fields that are absolute paths."""


def reportable(path: str) -> str:
    """``path`` as a session reports it: a name that is not UTF-8 (bytes, which Python
    reads with lone surrogates) shown escaped, ``/srv/caf\\xe9``.

    JSON carries only UTF-8, so such a cwd failed the whole registration in the
    client's encoder. A reported path is only shown and compared, never claimed, so
    the escaped spelling is enough (a claim under it is refused BAD_KEY instead:
    escaped, it would name another path)."""
    return escaped(path)


def escaped(text: str) -> str:
    """``text`` with what is not UTF-8 written out: an undecodable byte (a lone
    surrogate from ``surrogateescape``) as ``\\xe9``, any other lone surrogate as
    ``\\udXXX``; valid text is returned as it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            raw = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a surrogate no byte stands for (made in Python)
            return text.encode("utf-8", "backslashreplace").decode("utf-8")
        return raw.decode("utf-8", "backslashreplace")
    return text


def profile_rule(name: str) -> str:
    """What to change in ``name``, which :func:`is_profile` refused: the rule, and for
    ``.`` and ``..`` (made of the allowed characters) why they are refused."""
    rule = "use 1-64 characters from A-Z a-z 0-9 _ . -"
    if name in {".", ".."}:
        return f"{rule}, other than . and .. (they name folders)"
    return rule


def check_profile(name: str) -> str:
    """Return ``name`` if it is a valid profile name, else raise ``ValueError``."""
    if not is_profile(name):
        raise ValueError(f"invalid profile name {name!r}: {profile_rule(name)}")
    return name


SCHEMA_VERSION = 11
"""The database schema this release writes (its ``PRAGMA user_version``): the number of
migrations in :data:`meshd.store.MIGRATIONS` (a test keeps the two equal), here so that
``meshctl doctor`` can compare a database's without loading the store."""


def rfc3339(ts: float) -> str:
    """Wall time as RFC 3339 in UTC, to the second (``2026-11-29T14:02:00Z``).

    Cached per second: listings format the same few seconds over and over, and
    ``strftime`` is most of a small listing's cost.
    """
    second = int(ts)
    text = _RFC3339.get(second)
    if text is None:
        if len(_RFC3339) >= 8192:
            _RFC3339.clear()
        text = _RFC3339[second] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))
    return text


#: Second -> its RFC 3339 text (a dict, not functools.lru_cache: functools is start-up
#: time for every client command).
_RFC3339: dict[int, str] = {}


def label(sender: str) -> str:
    """The frame printed in front of another session's words (SPEC §6 Safety)."""
    if sender == DAEMON_SENDER:
        return "[from the mesh daemon — a notice about your sessions, not from you]"
    return f"[from {sender} — another session of yours, not you]"


def tilde(path: str, home: str | None = None) -> str:
    """``path`` with the home folder written ``~`` (``/home/u/p`` -> ``~/p``)."""
    home = (home if home is not None else os.path.expanduser("~")).rstrip("/")
    if home and home != "~":
        if path == home:
            return "~"
        if path.startswith(home + "/"):
            return "~" + path[len(home) :]
    return path
