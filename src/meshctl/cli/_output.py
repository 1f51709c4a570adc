"""What ``meshctl`` prints, and with which exit code (SPEC §9).

Two audiences read the output. People get short sentences; scripts pass ``--json``
and get **exactly one JSON document on stdout**. On failure that document is
``{"error": {"code", "message", "data"}}`` (the JSON-RPC error object, so scripts
switch on ``data.code`` whether the daemon or the CLI refused), and the human
message still goes to stderr so a person watching a script sees why it stopped.
Diagnostics never go to stdout.

Exit codes::

    0   done, granted, answered
    75  held, or no reply in time (``EX_TEMPFAIL``: try again later)
    1   an error; the message says what happened and what to do
    2   usage error (bad option, bad JSON argument)
    69  the daemon cannot be reached and could not be started (``EX_UNAVAILABLE``)

Decisions: a daemon that answers "storage unavailable" *was* reached, so it is
exit 1, not 69. A client-side timeout (:class:`MeshTimeout`) is 75, because
trying again later is the right reaction. JSON is encoded with the standard
library (msgspec stays off the CLI's import path; BENCH.md), pretty-printed
with two spaces so a person can read it too.

**Text from other sessions is data, not terminal commands**: a task,
message, handoff, notice, reason or path may hold ``ESC ]0;…``, ``ESC [2J``,
OSC 52, ``\r``, bidi overrides or a ``\n`` that would forge a line of its own.
:func:`safe` is the one function that neutralises them -- each shown escaped,
visibly (``\x1b``, ``\u202e``, ``\n``), on a terminal and in a pipe alike --
and every human rendering goes through it: renderers get documents cleaned by
:func:`clean` (single-line fields lose their line breaks too), and whatever is
printed for people passes :func:`safe` once more on its way out (:func:`say`).
``--json`` stays faithful: JSON escapes control characters itself.

Standard library only (click is imported only to print what plain writes would
print differently, see :func:`echo`); the client library is imported by the
commands that use it, never here.
"""

from __future__ import annotations

import codecs
import io
import os
import sys

from meshctl.cli import _terminal
from meshd.protocol import contract
from meshd.protocol import errors as E

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    import re
    from collections.abc import Callable
if TYPE_CHECKING:
    from typing import Any

    import click

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 69  # os.EX_UNAVAILABLE
EXIT_TEMPFAIL = 75  # os.EX_TEMPFAIL

#: JSON-RPC codes for failures the CLI finds itself (no daemon involved).
USAGE_CODE = E.INVALID_PARAMS
CLI_ERROR_CODE = -32000

#: What to do next, by ``data.code``: the second line of every human error.
HINTS: dict[str, str] = {
    "UNKNOWN_SESSION": "list live sessions with `meshctl sessions active`; "
    "register a new one with `meshctl register --task ...`",
    "SESSION_EXPIRED": "get a new one: export MESH_SESSION=$(meshctl register --task '...')",
    "ID_IN_USE": "choose another --id, or leave --id out to get a fresh one",
    "NO_SESSION": "get one with: export MESH_SESSION=$(meshctl register --task '...') "
    "(or pass --session ID)",
    "TOO_LARGE": "shorten the text (limits: task 200 characters, bodies max_body_bytes)",
    "MESH_DISABLED": "to switch it on, set enabled = true in config.toml (or remove that "
    "line), then run `meshctl daemon reload`",
    "FORBIDDEN": "the socket belongs to another user; use your own MESH_SOCKET",
    "METHOD_NOT_FOUND": "list the methods with `meshctl call mesh.schema`",
    "INVALID_PARAMS": "see the method's params with `meshctl call mesh.schema`",
    "TIMEOUT": "the daemon did not answer in time; try again, or check `meshctl daemon status`",
    "PROTOCOL": "the daemon and meshctl disagree on the wire; restart the daemon "
    "(`meshctl daemon restart`) so both run the same version",
    "FRAME_TOO_LARGE": "a request is limited to 1 MiB; send less at once",
}


#: Characters never written raw for people: C0 and C1 controls, DEL, bidi
#: embeddings/overrides/isolates and marks, line/paragraph separators, and lone
#: surrogates (undecodable bytes of argv or a path, PEP 383). Every one of them is
#: non-printable (``str.isprintable``), which :func:`safe` checks first; the patterns
#: are compiled on first need (together 2-3 ms, a tenth of a hot command's budget).
_UNSAFE = "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
_UNSAFE_MULTILINE = (
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)
_compiled: dict[bool, re.Pattern[str]] = {}
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: Fields that are prose and may span lines (messages, handoffs, answers).
MULTILINE_FIELDS = frozenset({"text", "summary", "answer", "question", "body"})


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    point = ord(char)
    if point < 0x100:
        return f"\\x{point:02x}"
    if 0xDC80 <= point <= 0xDCFF:
        return f"\\x{point - 0xDC00:02x}"  # the undecodable byte itself
    return f"\\u{point:04x}"


def safe(text: str, *, multiline: bool = False) -> str:
    """``text`` with every control, bidi and undecodable character shown escaped.

    Single-line (the default) also escapes ``\n`` and ``\t``, so a task or a key
    cannot start a line of its own; ``multiline`` keeps them for prose.
    """
    if text.isprintable() or (multiline and text.replace("\n", "").replace("\t", "").isprintable()):
        return text  # holds none of them: the common case, no pattern needed
    pattern = _compiled.get(multiline)
    if pattern is None:
        import re  # json and this are its only users; neither is on a hot command's path

        pattern = _compiled[multiline] = re.compile(_UNSAFE_MULTILINE if multiline else _UNSAFE)
    return pattern.sub(_escape, text) if pattern.search(text) else text


def words(text: tuple[str, ...] | list[str]) -> str:
    """A body given as words (joined with spaces), or as ``-``: read from stdin, one
    trailing newline dropped (``git log -1 | meshctl send ID -``). An empty stdin is a
    usage error: nothing is sent."""
    if list(text) != ["-"]:
        return " ".join(text)
    body = sys.stdin.read() if sys.stdin is not None else ""
    body = body[:-1] if body.endswith("\n") else body
    if not body:
        raise Failure(
            "TEXT: '-' reads the text from stdin, and stdin was empty", "USAGE",
            code=USAGE_CODE, exit_code=EXIT_USAGE, data={"argument": "TEXT"}, hint="",
        )  # fmt: skip
    return body


def few(items: Any, shown: int = 3) -> str:
    """``a, b, c and 32 more (--json lists them)``: a list of ids a person can read at a
    glance; the whole list stays in the ``--json`` document."""
    items = [str(i) for i in items]
    if len(items) <= shown + 1:
        return ", ".join(items)
    return f"{', '.join(items[:shown])} and {len(items) - shown} more (--json lists them)"


def clean(document: Any, *, multiline: bool = False) -> Any:
    """A copy of a daemon reply that is safe to render for people (see :func:`safe`).

    Strings under :data:`MULTILINE_FIELDS` keep their line breaks; every other
    string, and every mapping key, is made single-line.
    """
    if isinstance(document, str):
        return safe(document, multiline=multiline)
    if isinstance(document, dict):
        return {
            safe(str(k)): clean(v, multiline=k in MULTILINE_FIELDS) for k, v in document.items()
        }
    if isinstance(document, list | tuple):
        return [clean(v, multiline=multiline) for v in document]
    return document


class Failure(Exception):
    """A failure on its way to the user: one error object plus an exit code.

    Every error a command meets -- from the daemon, from the client library, or
    found by the CLI itself -- becomes one of these before it is printed, so
    the printing rules live in one place (:func:`report`). ``hint`` defaults to
    the one for ``data_code`` in :data:`HINTS`. (A plain class, not a dataclass:
    building dataclasses costs start-up time on every run.)
    """

    def __init__(
        self,
        message: str,
        data_code: str,
        *,
        code: int = CLI_ERROR_CODE,
        exit_code: int = EXIT_ERROR,
        data: dict[str, Any] | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.data_code = data_code
        self.code = code
        self.exit_code = exit_code
        self.data: dict[str, Any] = {"code": data_code, **(data or {})}
        self.hint = hint if hint is not None else HINTS.get(data_code)

    def to_json(self) -> dict[str, Any]:
        """The ``{"error": ...}`` document printed under ``--json``."""
        return {"error": {"code": self.code, "message": self.message, "data": self.data}}

    def human(self) -> str:
        """The message for stderr: what happened, then what to do."""
        text = f"meshctl: {safe(self.message, multiline=True)}"
        return f"{text}\n  {safe(self.hint, multiline=True)}" if self.hint else text


def exit_code_for(exc: E.MeshError) -> int:
    """SPEC §9's exit code for an error the client library raised."""
    if isinstance(exc, E.StorageUnavailable):
        return EXIT_ERROR  # the daemon answered; it could not store
    if isinstance(exc, E.MeshUnavailable):
        return EXIT_UNAVAILABLE
    if isinstance(exc, E.MeshTimeout):
        return EXIT_TEMPFAIL
    return EXIT_ERROR


#: ``data.reason`` of an UNAVAILABLE that the fleet caused, not the disk (SPEC §12).
FLEET_REASONS = ("fleet", "no responders")


def fleet_hint(claim: bool) -> str:
    """What to do when the fleet could not be reached: look at it, not at the disk."""
    hint = "`meshctl fleet status` says why the fleet cannot be reached; this host's mesh works"
    if claim:  # a fleet-wide key, refused with on_partition = "fail"
        hint += '; to claim on this host alone meanwhile, set on_partition = "local" in [fleet]'
    return hint


def from_mesh_error(exc: E.MeshError) -> Failure:
    """Wrap a :class:`MeshError` (its wire code and ``data`` kept) for printing."""
    data = dict(exc.data)
    data_code = str(data.pop("code", exc.data_code))
    hint = "pass --broad to claim it all the same" if data.get("needs") == "broad" else None
    if data_code == "FORBIDDEN" and "author" in data:  # a note, not a foreign uid's socket
        hint = f"act as its author (--session {data['author']}), or ask that session to remove it"
    message = exc.message
    path = data.get("path")
    if data_code == "INVALID_PARAMS" and path and path != "$" and str(path) not in message:
        # The wire keeps the field's JSON path apart (data.path); a person needs it in
        # the sentence to know which field of their params was refused.
        message = f"{message} - at `{path}`"
    if data_code == "SESSION_EXPIRED" and data.get("caller") is False:  # not the caller's
        hint = "list live sessions with `meshctl sessions active`"
    if data_code == "BAD_KEY" and hint is None:
        hint = relative_hint(data.get("key"))
    if isinstance(exc, E.StorageUnavailable) and data.get("reason") in FLEET_REASONS:
        hint = fleet_hint("resource" in data)
    elif isinstance(exc, E.StorageUnavailable):
        hint = (
            "nothing was changed; the daemon still answers reads. `meshctl doctor` checks "
            "the state folder (a full disk, a read-only folder)"
        )
    return Failure(
        message,
        data_code,
        code=exc.code,
        exit_code=exit_code_for(exc),
        data=data,
        hint=hint,
    )


def relative_hint(key: Any, cwd: str | None = None) -> str | None:
    """What to type instead of a relative path the daemon refused (``BAD_KEY`` names the
    key as typed): the absolute key it would mean from here. Only said: meshctl never
    sends a key resolved (SPEC §5: the daemon canonicalises what the user typed)."""
    if not isinstance(key, str) or len(key) > 200:  # the daemon cut a longer key short
        return None
    from meshctl._claims import meant

    absolute = meant(key, cwd)
    if absolute is None:
        return None
    return f'relative path "{key}": give it absolute, e.g. {absolute}'


def went_away(exc: E.MeshError, waiting: str, outcome: str) -> Failure:
    """The daemon this command had reached went away while ``waiting`` (its connection
    closed before the answer: stopped, restarted or killed).

    Exit 1, not 69: 69 is "cannot be reached and could not be started", and this one
    was reached, and the next command starts one again (SPEC §9); a script that takes
    69 for "no mesh here, go on unguarded" must not do so while a claim it waited on
    may still be held (claims outlive a daemon restart). ``data.code`` stays
    ``UNAVAILABLE`` with ``data.went_away`` true.
    """
    return Failure(
        f"meshd went away while {waiting} (it was stopped, restarted or crashed): {outcome}",
        "UNAVAILABLE",
        code=exc.code,
        data={"went_away": True, "detail": exc.message},
        hint="run the command again (meshd starts again on demand); `meshctl daemon status` "
        "and the log in the state folder say why it stopped",
    )


def no_session() -> Failure:
    """The refusal of a command that acts for a session but was given none."""
    return Failure(
        "this command acts for a session, and none was given (no --session and no MESH_SESSION)",
        "NO_SESSION",
        code=E.NoSession.code,
    )


def internal_error(exc: BaseException) -> Failure:
    """A bug in meshctl, said in one sentence (``MESHCTL_DEBUG=1`` shows the traceback)."""
    return Failure(
        f"internal error: {type(exc).__name__}: {exc}",
        "INTERNAL",
        hint="this is a bug in meshctl; run again with MESHCTL_DEBUG=1 to see where, and report it",
    )


def reader_gone() -> None:
    """stdout's reader went away: point stdout at /dev/null so the exit stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


def usage_failure(exc: click.UsageError) -> Failure:
    """A click usage error as an error document (printed under ``--json`` only)."""
    return Failure(exc.format_message(), "USAGE", code=USAGE_CODE, exit_code=EXIT_USAGE)


def report(failure: Failure, as_json: bool) -> None:
    """Print a failure: JSON document on stdout when asked, the sentence on stderr.

    Either stream may be a pipe whose reader left; that loses the words, not the exit code.
    """
    if as_json and not isinstance(failure, ReaderGone):
        try:
            write_json(failure.to_json())
        except BrokenPipeError:
            reader_gone()
    try:
        human = failure.human()
        echo(_terminal.error(human) if _terminal.colour(sys.stderr) else human, err=True)
    except BrokenPipeError:  # not contextlib.suppress: contextlib costs start-up time
        return


def echo(text: str, *, err: bool = False) -> None:
    """``click.echo(text, err=err)``, without importing click where it would do nothing more.

    On a text stream whose encoding is not ASCII (click re-wraps those as UTF-8) and
    for text without an escape character (click strips ANSI codes when the stream
    is not a terminal, and colour follows its context), click.echo writes the text
    and a newline, then flushes: exactly what this does. Every other case goes to
    click.echo itself. All output passes here, so the fast path of the hot
    commands (which never imports click) and the click commands print the same bytes.
    """
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return  # as click.echo: no stream attached (pythonw)
    if _terminal.colour(stream):  # our own escapes only: others' text is escaped already
        stream.write(_terminal.paint(text) + "\n")
        stream.flush()
        return
    if "\x1b" in text or not _plain_text_stream(stream):
        import click

        click.echo(text, err=err)
        return
    stream.write(text + "\n")
    stream.flush()


def _plain_text_stream(stream: Any) -> bool:
    """Whether click.echo would write to ``stream`` as it is (``click._compat``'s rules)."""
    if not isinstance(stream, io.TextIOWrapper) or stream.errors is None:
        return False
    try:
        return codecs.lookup(stream.encoding).name != "ascii"
    except LookupError:
        return True


def write_json(document: Any) -> None:
    """Write one JSON document to stdout (stdlib ``json``; non-ASCII kept readable)."""
    echo(dump_json(document, indent=2))


def dump_json(document: Any, indent: int | None = None) -> str:
    """``document`` as JSON text; non-ASCII kept readable unless it holds lone
    surrogates (undecodable bytes), which only ``\\udcXX`` escapes carry faithfully."""
    import json  # only for --json: json loads re, enum and functools

    options: dict[str, Any] = {"indent": indent, "default": str}
    if not indent:
        options["separators"] = (",", ":")
    text = json.dumps(document, ensure_ascii=False, **options)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(document, **options)
    return text


def emit(as_json: bool, document: Any, human: str | Callable[[], str | None] | None) -> None:
    """Print a command's result: ``document`` under ``--json``, else the human text.

    ``human`` may be a callable so that the text is only built when it is shown;
    ``None`` (or an empty string) prints nothing, for commands that succeed silently.
    """
    if as_json:
        write_json(document)
        return
    text = human() if callable(human) else human
    if text:
        say(text)


def say(text: str, *, err: bool = False) -> None:
    """Print text for people, made :func:`safe` (line breaks kept) on the way out."""
    echo(safe(text, multiline=True), err=err)


def deliver(text: str) -> bool:
    """Write ``text`` and a newline to stdout, and wait until its reader has taken it.

    For commands that consume state by printing it (``inbox`` marks read what it
    has written out in full; SPEC §6). On a pipe or FIFO, *taken* means read out
    of the pipe: the bytes still in it are counted (``FIONREAD``) until none are
    left, or the reader closes its end first (``POLLERR``) and the rest is lost,
    which returns False -- as does a write that meets ``EPIPE``. On a terminal or
    a file, written is taken. Waiting per item is what lets ``inbox | head``
    consume only what ``head`` read.
    """
    stream = sys.stdout
    try:
        stream.write(text + "\n")
        stream.flush()
    except BrokenPipeError:
        return False
    try:
        fd = stream.fileno()
    except (OSError, ValueError):
        return True  # not a real file (a test runner's buffer): written is all we know
    return _drained(fd)


def _drained(fd: int) -> bool:
    import select
    import stat

    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return True
    except OSError:
        return True
    poller = select.poll()
    poller.register(fd, 0)  # no events asked: poll reports only POLLERR/POLLHUP
    pause = 1
    while True:
        left = _unread(fd)
        if left is None or left == 0:
            return True
        if poller.poll(pause):
            return False  # the reader closed its end with bytes still unread
        pause = min(pause * 2, 50)


def _unread(fd: int) -> int | None:
    """Bytes in the pipe behind ``fd`` that nobody has read yet (None: cannot tell)."""
    import fcntl
    import termios

    try:
        raw = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return None
    return int.from_bytes(raw, "little", signed=True)


def hand_over(as_json: bool, document: Any, human: Callable[[], str], lost: str) -> None:
    """:func:`emit` for a result that is gone once printed: raise :class:`ReaderGone`
    (saying ``lost``: what became of it) unless stdout's reader took it in full."""
    text = dump_json(document, indent=2) if as_json else safe(human(), multiline=True)
    if not deliver(text):
        raise ReaderGone(lost)


class ReaderGone(Failure):
    """stdout's reader went away before it took everything (exit 1, never 0)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"the reader of stdout went away: {what}", "READER_GONE", hint="")


def note(text: str) -> None:
    """A diagnostic for people: always stderr, never mixed into a JSON document."""
    say(f"meshctl: {text}", err=True)


def tilde(path: str | None, home: str | None = None) -> str | None:
    """``path`` with the home folder written ``~`` (``/home/u/p`` -> ``~/p``); None stays."""
    return contract.tilde(path, home) if path else path
