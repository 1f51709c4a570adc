#!/usr/bin/env python3
"""Write the blocking client's session layer from the async one (httpcore's unasync).

``src/meshctl/_async/`` ``abc.py``, ``session.py``, ``claim.py``, ``registration.py``,
``shared.py``, ``responder.py``, ``preempt.py`` and ``events.py`` are the one source; their ``src/meshctl/_sync/``
namesakes are generated from them by the
substitutions below, then put in the house's import order and format (ruff, from the
same environment). Usage::

    scripts/unasync.py            # rewrite the generated files
    scripts/unasync.py --check    # exit 1 when a generated file is stale (scripts/test.sh)

What differs between an event loop and threads is not substituted: each side has its
own backend module (``_async/_backend.py``, ``_sync/_backend.py``) with the same names.
"""

from __future__ import annotations

import difflib
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "meshctl"
#: Source (async, hand-written) -> generated (blocking), relative to the package.
FILES = {
    "_async/abc.py": "_sync/abc.py",
    "_async/session.py": "_sync/session.py",
    "_async/claim.py": "_sync/claim.py",
    "_async/registration.py": "_sync/registration.py",
    "_async/shared.py": "_sync/shared.py",
    "_async/responder.py": "_sync/responder.py",
    "_async/preempt.py": "_sync/preempt.py",
    "_async/events.py": "_sync/events.py",
}
#: (pattern, replacement), applied in order to every line.
SUBS = [
    (r"\bmeshctl\._async\b", "meshctl._sync"),
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\basync for\b", "for"),
    (r"\bawait ", ""),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\b__aiter__\b", "__iter__"),
    (r"\b__anext__\b", "__next__"),
    (r"\bStopAsyncIteration\b", "StopIteration"),
    (r"\baclose\b", "close"),
    (r"\bAsync([A-Z]\w*)", r"\1"),  # AsyncSession -> Session, AsyncIterator -> Iterator
]
_COMPILED = [(re.compile(p), r) for p, r in SUBS]


def header(source: str) -> str:
    return (
        f"# Generated from src/meshctl/{source} by scripts/unasync.py: edit that file and\n"
        "# run scripts/unasync.py (scripts/test.sh fails while this one is stale).\n"
    )


def unasync(text: str) -> str:
    """The blocking twin of an async module's text (before formatting)."""
    out = []
    for line in text.splitlines(keepends=True):
        for pattern, repl in _COMPILED:
            line = pattern.sub(repl, line)  # noqa: PLW2901 (each substitution on the last)
        out.append(line)
    return "".join(out)


def _ruff() -> str:
    here = Path(sys.executable).parent / "ruff"
    found = str(here) if here.exists() else shutil.which("ruff")
    if found is None:
        sys.exit("unasync: ruff not found (install the test extras: pip install -e '.[test]')")
    return found


def tidy(text: str, name: str) -> str:
    """Imports sorted and the house format, as ``ruff check --fix`` and ``ruff format`` leave
    a hand-written file (the substitutions change names and line lengths)."""
    ruff, cwd = _ruff(), str(ROOT)
    fixed = subprocess.run(
        [ruff, "check", "--fix-only", "--select", "I,UP,F401", "--stdin-filename", name, "-"],
        input=text, capture_output=True, text=True, check=True, cwd=cwd,
    ).stdout  # fmt: skip
    return subprocess.run(
        [ruff, "format", "--stdin-filename", name, "-"],
        input=fixed, capture_output=True, text=True, check=True, cwd=cwd,
    ).stdout  # fmt: skip


def generated(source: str, target: str) -> str:
    text = (PACKAGE / source).read_text(encoding="utf-8")
    # Named as in the repository, so ruff reads the project's settings wherever PACKAGE is.
    return tidy(header(source) + unasync(text), str(ROOT / "src" / "meshctl" / target))


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for source, target in FILES.items():
        want = generated(source, target)
        path = PACKAGE / target
        have = path.read_text(encoding="utf-8") if path.exists() else ""
        if have == want:
            continue
        if check:
            stale.append(target)
            diff = difflib.unified_diff(
                have.splitlines(keepends=True), want.splitlines(keepends=True),
                f"src/meshctl/{target}", f"src/meshctl/{target} (from {source})", n=1,
            )  # fmt: skip
            sys.stdout.writelines(list(diff)[:40])
        else:
            path.write_text(want, encoding="utf-8")
            print(f"unasync: wrote src/meshctl/{target}")
    if stale:
        print(f"unasync: stale: {', '.join(stale)}; run scripts/unasync.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
