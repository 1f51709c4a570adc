"""Resource keys: what a claim is on, made canonical (SPEC §5).

Clients send what the user typed; the daemon turns it into one canonical
:class:`Key` so that two spellings of the same thing (``~/p``, ``/home/u/p/``,
``/home/u/link-to-p``) meet in the lock table. Path keys are resolved with
:func:`os.path.realpath`, which reads the filesystem: that is why this module
lives outside :mod:`meshd.core` (the lock table only ever sees finished keys).

Kinds::

    file:/abs/path   (or a bare absolute path)   covers its descendants
    repo:/abs/path   same path space as file:     overlaps file: keys under it
    branch:/repo:NAME                             split at the last ':'
    port:N  port:N/udp  (port:N/tcp == port:N)    1..65535
    cron:X gateway:X account:X box:X skill:X res:X   matched exactly
    memory  ui:desktop                            bare, matched exactly

Refused with :class:`~meshd.protocol.errors.BadKey` (the message names the key,
says what is wrong and what to do): relative paths, empty values, unknown kinds,
control and bidi-override characters, keys over 4096 bytes, paths that resolve
(through a link, or as written) to a name that is not UTF-8, and -- unless
``broad`` -- ``file:/``, the home folder and the folders above it.

Why the UTF-8 rule: Linux file names are bytes, and Python reads one that is not
UTF-8 as a string with lone surrogates (``surrogateescape``). Such a key could be
neither stored (SQLite refuses it: the grant's commit failed) nor written as JSON
(a reply listing it failed), so it is refused here, where the user learns why.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field

from meshd.protocol.errors import BadKey

MAX_KEY_BYTES = 4096
PATH_KINDS = frozenset({"file", "repo"})
EXACT_KINDS = frozenset({"cron", "gateway", "account", "box", "skill", "res"})
BARE_KEYS = {"memory": ("memory", ""), "ui:desktop": ("ui", "desktop")}
KINDS = PATH_KINDS | EXACT_KINDS | {"branch", "port", "memory", "ui"}
_PORT_RE = re.compile(r"^([0-9]{1,5})(?:/(tcp|udp))?$")
#: Control characters, and bidi marks/embeddings/overrides/isolates: a key shown to
#: a person must read as what it is (``file:/x/\u202etxt.exe`` would not).
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_KIND_RE = re.compile(r"^([A-Za-z]+):")


@dataclass(frozen=True, slots=True)
class Key:
    """A canonical resource key.

    ``kind`` is one of :data:`KINDS`; ``value`` the canonical value (an absolute
    real path for path kinds, ``"8080"``/``"53/udp"`` for ports, ``""`` for
    ``memory``); ``parts`` the path components for ``file:``/``repo:`` (empty
    for every other kind, and for ``/``). ``text`` is the one spelling used on
    the wire, in the store and as the lock table's identity.
    """

    kind: str
    value: str
    parts: tuple[str, ...] = ()
    text: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        text = self.kind if self.kind == "memory" else f"{self.kind}:{self.value}"
        object.__setattr__(self, "text", text)

    def __str__(self) -> str:
        return self.text

    @property
    def is_path(self) -> bool:
        """True for ``file:`` and ``repo:``: keys that cover their descendants."""
        return self.kind in PATH_KINDS

    def overlaps(self, other: Key) -> bool:
        """Whether a claim on ``self`` and one on ``other`` touch the same thing.

        Path keys overlap when one path is an ancestor of (or equal to) the other,
        across ``file:`` and ``repo:``; every other key overlaps only itself.
        """
        if self.is_path and other.is_path:
            n = min(len(self.parts), len(other.parts))
            return self.parts[:n] == other.parts[:n]
        return self.text == other.text


#: What to do about a relative path: the daemon's folder means nothing to the caller.
_RELATIVE_TODO = "give an absolute path (the daemon does not know the caller's folder)"


def _refuse(raw: str, what: str, todo: str, **data: str) -> BadKey:
    shown = _escaped(raw if len(raw) <= 200 else raw[:200] + "…")
    return BadKey(f"bad resource key {shown!r}: {what}; {todo}", {"key": shown, **data})


def _escaped(text: str) -> str:
    """``text`` as it can be shown and sent: a byte that is not UTF-8 (a lone
    surrogate, as Python reads it from a file name) becomes ``\\xff``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text


def _utf8(raw: str, real: str) -> str:
    """``real``, refused when a component of it is not UTF-8 (see the module doc).

    The check costs one encode, which the length check needs anyway."""
    try:
        size = len(real.encode("utf-8"))
    except UnicodeEncodeError:
        bad = next(n for n in real.split("/") if _escaped(n) != n)
        raise _refuse(
            raw,
            f'it resolves to "{_escaped(real)}", whose component "{_escaped(bad)}" is not '
            "UTF-8, so the key could be neither stored nor sent",
            "rename that file or folder to UTF-8, or claim a path outside it",
            component=_escaped(bad),
        ) from None
    if size > MAX_KEY_BYTES:
        raise _refuse(
            raw, f"it resolves to more than {MAX_KEY_BYTES} bytes", "claim a shorter path"
        )
    return real


def path_key(kind: str, path: str) -> Key:
    """Build a path key from an already canonical absolute path (no I/O)."""
    parts = _parts(path)
    return Key(kind, "/" + "/".join(parts), parts)


def _parts(path: str) -> tuple[str, ...]:
    """The components of an absolute path (``//`` and a trailing ``/`` add none)."""
    return tuple(filter(None, path.split("/")))


def canonical_key(raw: str, *, cwd: str | None = None, home: str, broad: bool = False) -> Key:
    """Turn what the user typed into a canonical :class:`Key`, or raise ``BadKey``.

    ``home`` is the user's home folder (``~`` expands against it, and it may not be
    claimed whole unless ``broad``). ``cwd`` is accepted for the caller's
    convenience but never used: the daemon refuses relative paths, because its
    own working directory means nothing to the user (clients send keys as typed,
    never resolved; ``meshctl`` says the absolute path a refused one would mean).
    """
    del cwd  # relative paths are refused, never resolved against the daemon's cwd
    if not isinstance(raw, str) or not raw:
        raise _refuse(str(raw), "it is empty", "give a key such as file:/path or port:8080")
    if _CONTROL_RE.search(raw):
        raise _refuse(raw, "it contains control or bidi-override characters", "remove them")
    try:
        size = len(raw.encode("utf-8"))
    except UnicodeEncodeError:  # never off the wire (JSON is UTF-8): a caller's bug
        raise _refuse(raw, "it is not UTF-8", "give the key as UTF-8 text") from None
    if size > MAX_KEY_BYTES:
        raise _refuse(raw, f"it is longer than {MAX_KEY_BYTES} bytes", "claim a shorter key")
    if raw[0] in "/~":
        return _path(raw, "file", raw, home, broad)
    if raw in BARE_KEYS:
        return Key(*BARE_KEYS[raw])
    match = _KIND_RE.match(raw)
    if match is None and (raw[0] == "." or "/" in raw.partition(":")[0]):
        raise _refuse(raw, "the path is relative", _RELATIVE_TODO)
    if match is None:
        raise _refuse(
            raw,
            "it is neither an absolute path nor kind:value",
            "use an absolute path (relative paths are refused) or one of "
            + ", ".join(sorted(k + ":" for k in KINDS - {"memory", "ui"}))
            + " memory, ui:desktop",
        )
    kind, value = match.group(1).lower(), raw[match.end() :]
    return _parse_kind(raw, kind, value, home, broad)


def touched_paths(raw: str, home: str) -> list[str] | None:
    """The filesystem paths :func:`canonical_key` resolves for ``raw`` (``[]`` for
    ``res:X``, ``port:N`` and other kinds that read nothing; ``None`` when it cannot
    say). Used to decide whether resolving may block on a hung mount."""
    if not isinstance(raw, str) or not raw:
        return []
    if raw[0] in "/~":
        kind, value = "file", raw
    else:
        match = _KIND_RE.match(raw)
        if match is None:
            return []
        kind, value = match.group(1).lower(), raw[match.end() :]
        if kind == "branch":
            value = value.rpartition(":")[0]
        elif kind not in PATH_KINDS:
            return []
    if value == "~" or value.startswith("~/"):
        return [home + value[1:], home]
    return [value, home] if value.startswith("/") else None


def _parse_kind(raw: str, kind: str, value: str, home: str, broad: bool) -> Key:
    if kind not in KINDS:
        raise _refuse(raw, f"unknown kind {kind!r}", "use one of " + ", ".join(sorted(KINDS)))
    if not value:
        raise _refuse(raw, "the value after the ':' is empty", "say what you claim")
    if kind in PATH_KINDS:
        return _path(raw, kind, value, home, broad)
    if kind == "branch":
        return _branch(raw, value, home)
    if kind == "port":
        return _port(raw, value)
    if kind in EXACT_KINDS:
        if value != value.strip():
            raise _refuse(raw, "the value starts or ends with spaces", "remove them")
        return Key(kind, value)
    raise _refuse(raw, f"{kind} takes no value here", "use the bare 'memory' or 'ui:desktop'")


def _expand(raw: str, path: str, home: str) -> str:
    if path == "~" or path.startswith("~/"):
        return os.path.join(home, path[2:]) if len(path) > 1 else home
    if path.startswith("~"):
        raise _refuse(raw, "~user paths are not expanded", "write the absolute path")
    if not path.startswith("/"):
        raise _refuse(raw, "the path is relative", _RELATIVE_TODO)
    return path


def realpath(path: str) -> str:
    """``os.path.realpath(path)`` for an absolute ``path``, at a fraction of its cost
    where no link is on the way (every ``claim.check`` and claim resolves one or two).

    It walks the path as realpath does, ``lstat`` on each component in turn, and
    differs only in what it skips: the first link met hands the whole path to
    ``os.path.realpath``, which follows it; the first component that cannot be
    looked at (missing, not a folder, not searchable) ends the walk with the rest
    appended as written -- nothing under it can be looked at either, so realpath
    would find every further ``lstat`` failing and append them alike (a path with
    ``..`` goes to realpath whole: there a missing folder can be stepped back out of).

    Nothing is cached: a link made or moved since the last request is seen by the
    next one, as with realpath. (A cache of resolved paths would need every folder
    on the way re-checked to be safe -- a path's folder replaced by a link to another
    folder would leave two spellings of one real file, and two sessions could hold
    it at once -- which is the walk itself.)
    """
    return _walk(path)[0]


def _walk(path: str) -> tuple[str, bool]:
    """:func:`realpath`, and whether the answer is ``path`` itself, tidied: True when
    the walk met no link and no ``..`` (then every component it ``lstat``-ed, in
    order, is a real folder, up to the first that cannot be looked at)."""
    names = path.split("/")
    if ".." in names:
        return os.path.realpath(path), False
    # Written as realpath writes (absolute; no //, trailing / or .): stopped, the
    # answer is the path itself, and nothing needs putting back together.
    tidy = path[:1] == "/" and names.count("") == 1 and "." not in names
    done = ""
    lstat, islink = os.lstat, stat.S_ISLNK
    for i, name in enumerate(names):
        if not name or name == ".":
            continue
        step = done + "/" + name
        try:
            mode = lstat(step).st_mode
        except OSError:
            if tidy:
                return path, True
            rest = [n for n in names[i + 1 :] if n and n != "."]
            return "/".join([step, *rest]), True
        if islink(mode):
            return os.path.realpath(path), False
        done = step
    return done or "/", True


@dataclass(frozen=True, slots=True)
class _Home:
    """The string work of resolving a home folder, done once per home string (it
    changes only with the daemon's environment). What the filesystem says is never
    kept: :func:`_real_home` asks it on every request."""

    text: str  #: the home as realpath gives it when no link is on the way
    steps: tuple[str, ...]  #: each folder on the way, in the order the walk looks


@functools.lru_cache(maxsize=8)
def _home(home: str) -> _Home | None:
    """``home`` taken apart, or None for one the walk does not take (relative, with
    ``..`` or a NUL): that is resolved the long way, as any path."""
    names = [n for n in home.split("/") if n and n != "."]
    if not home.startswith("/") or ".." in names or "\0" in home:
        return None
    steps = tuple("/" + "/".join(names[: i + 1]) for i in range(len(names)))
    return _Home(steps[-1] if steps else "/", steps)


def _real_home(raw: str, home: str, real: str, clean: bool) -> str:
    """``realpath(home)``, as :func:`_real` gives it, for a key whose path resolved to
    ``real`` (``clean``: as :func:`_walk` says).

    A clean path at or under the home folder's text proves the home too: its walk
    looked at each folder of the home, in the same order, a moment ago, and met no
    link (or stopped where the home's own walk would). Otherwise the home's folders
    are looked at again, one ``lstat`` each -- the walk of :func:`realpath` without
    taking the string apart every time. Only the string work is cached, never an
    answer of the filesystem: a home folder re-pointed (a link on its way made,
    moved or removed) is seen by the next request.
    """
    h = _home(home)
    if h is None:
        return _tidy(_real(raw, home))
    text = h.text
    if clean and (real == text or real.startswith(text + "/")):
        return text
    lstat, islink = os.lstat, stat.S_ISLNK
    for step in h.steps:
        try:
            mode = lstat(step).st_mode
        except OSError:
            return text  # as realpath: the rest appended as written
        if islink(mode):
            return _tidy(_real(raw, home))
    return text


def _tidy(path: str) -> str:
    """``path`` with empty parts dropped (``os.path.realpath`` gives ``//x`` when it
    stops at a link loop): the home is compared by its parts."""
    return "/" + "/".join(_parts(path))


def broad_place(where: str, homes: Iterable[str]) -> bool:
    """Whether ``where`` is ``/``, one of ``homes`` or a folder above one: the places a
    claim needs ``--broad`` for (SPEC §5).

    One rule for two callers: :func:`canonical_key` asks it of a path key's canonical
    value with the home folder resolved now; the board (``meshd.domains.board``)
    asks it of a session's cwd or repo as reported, with the home as written and as
    resolved, so that a shell opened in ``~`` is not told of every file beneath it.
    Compared as written, at ``/`` boundaries (``/ho`` is not above ``/home/u``).
    """
    if where == "/":
        return True
    below = where + "/"
    return any(home == where or home.startswith(below) for home in homes)


def _real(raw: str, path: str) -> str:
    """``path`` resolved, not yet checked (the home folder is only compared, never
    sent: a home that is not UTF-8 must not refuse every other key)."""
    return _walked(raw, path)[0]


def _walked(raw: str, path: str) -> tuple[str, bool]:
    """:func:`_walk`, a path that cannot be resolved refused."""
    try:
        return _walk(path)  # non-strict: a path that does not exist yet is fine
    except (OSError, ValueError) as exc:
        raise _refuse(raw, f"the path cannot be resolved ({exc})", "check the path") from exc


def _path(raw: str, kind: str, value: str, home: str, broad: bool) -> Key:
    real, clean = _walked(raw, _expand(raw, value, home))
    if clean and real != "/":  # as the walk writes it: no part to filter out, no join back
        key = Key(kind, _utf8(raw, real), tuple(real[1:].split("/")))
    else:  # os.path.realpath may give //x (a link loop): path_key tidies it
        key = path_key(kind, _utf8(raw, real))
    if not broad:  # the home folder is only compared: never sent, never a Key
        real_home = _real_home(raw, home, real, clean)
        if broad_place(key.value, (real_home,)):
            if not key.parts:
                what = "it is the whole filesystem"
            elif key.value == real_home:
                what = "it is your home folder"
            else:
                what = "it contains your home folder"
            # Each client names its own switch (meshctl --broad, broad=True): data.needs.
            raise _refuse(raw, what, "claim something narrower", needs="broad")
    return key


def _branch(raw: str, value: str, home: str) -> Key:
    repo, sep, name = value.rpartition(":")
    if not sep or not repo or not name:
        raise _refuse(raw, "it is not branch:/repo:NAME", "write e.g. branch:/home/u/project:main")
    if name != name.strip():
        raise _refuse(raw, "the branch name starts or ends with spaces", "remove them")
    real = _utf8(raw, _real(raw, _expand(raw, repo, home)))
    return Key("branch", f"{path_key('repo', real).value}:{name}")


def _port(raw: str, value: str) -> Key:
    match = _PORT_RE.match(value)
    number = int(match.group(1)) if match else 0
    if match is None or not 1 <= number <= 65535:
        raise _refuse(raw, "it is not a port 1-65535", "write port:N, port:N/tcp or port:N/udp")
    suffix = "/udp" if match.group(2) == "udp" else ""
    return Key("port", f"{number}{suffix}")


def from_canonical(text: str) -> Key:
    """Rebuild a key from its canonical ``text`` (as stored), without touching the disk.

    Used when the store restores claims: they were canonicalised when claimed.
    Raises ``BadKey`` if ``text`` is not a canonical key's shape.
    """
    if text in BARE_KEYS:
        return Key(*BARE_KEYS[text])
    kind, sep, value = text.partition(":")
    if not sep or kind not in KINDS or not value:
        raise _refuse(text, "it is not a canonical key", "canonicalise it with canonical_key")
    if kind in PATH_KINDS:
        return path_key(kind, value)
    return Key(kind, value)


def describe(key: Key, *, home: str | None = None) -> str:
    """Human text for a key, with the home folder shown as ``~``.

    ``file:/home/u/p`` -> ``~/p``; ``repo:/srv/x`` -> ``repo /srv/x``;
    ``branch:/home/u/p:main`` -> ``branch main of ~/p``; ``port:53/udp`` ->
    ``port 53/udp``; ``cron:daily`` -> ``cron daily``; ``memory`` -> ``memory``.
    """
    if key.is_path:
        shown = _tilde(key.value, home)
        return shown if key.kind == "file" else f"repo {shown}"
    if key.kind == "branch":
        repo, _, name = key.value.rpartition(":")
        return f"branch {name} of {_tilde(repo, home)}"
    if key.kind == "memory":
        return "memory"
    if key.kind == "ui":
        return "the desktop"
    return f"{key.kind} {key.value}"


def _tilde(path: str, home: str | None) -> str:
    if not home:
        return path
    homes = {home.rstrip("/") or "/", os.path.realpath(home)}
    for h in homes:
        if h != "/" and (path == h or path.startswith(h + "/")):
            return "~" + path[len(h) :]
    return path
