"""meshd with a bench-only switch: ``python -m bench.meshd_variant --no-group-commit run …``.

BENCH.md compares the durable write rate with "the same daemon with group commit
switched off". meshd has no such switch on purpose (it is not a user setting), so
this launcher builds the daemon's :class:`meshd.store.Store` with
``group_commit=False`` and otherwise runs the real ``meshd`` command line.
"""

import functools
import sys

from meshd import app, store
from meshd.cli import main

if __name__ == "__main__":
    args = sys.argv[1:]
    if "--no-group-commit" in args:
        args.remove("--no-group-commit")
        app.Store = functools.partial(store.Store, group_commit=False)  # type: ignore[misc]
    sys.argv = ["meshd", *args]
    main()
