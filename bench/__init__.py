"""Session Mesh benchmarks: every figure a ratio to a floor measured in the same run.

Run ``python -m bench`` from the repository root (``--quick`` for the CI smoke
run, ``--only SECTION`` to run a few sections, ``--json PATH``). See
docs/PERFORMANCE.md for the latest table and what each number means.
"""
