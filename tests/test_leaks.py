"""A failed test that leaves a subprocess's pipe open is blamed for it itself
(tests/leaks.py), instead of the later test that happens to collect its garbage."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_TWO_TESTS = """
import gc, subprocess, sys

def test_leaks_a_pipe_and_fails():
    child = subprocess.Popen([sys.executable, "-c", "print('ready')"], stdout=subprocess.PIPE)
    assert child.stdout.readline() == b"something else"

def test_innocent_one_that_collects():
    gc.collect()
"""


def outcomes(folder: Path, *plugin: str) -> list[str]:
    """The ``-rA`` summary lines of pytest run on the two tests, warnings as errors."""
    (folder / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    (folder / "test_two.py").write_text(_TWO_TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
         "-rA", *plugin, "test_two.py"],
        cwd=folder, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip
    return sorted(
        line.split(" - ")[0]
        for line in done.stdout.splitlines()
        if line.startswith(("PASSED ", "FAILED ", "ERROR "))
    )


def test_the_leak_is_an_error_of_the_test_that_leaked(short_tmp: Path) -> None:
    without = outcomes(short_tmp)
    with_plugin = outcomes(short_tmp, "-p", "tests.leaks")

    assert without == [
        "FAILED test_two.py::test_innocent_one_that_collects",
        "FAILED test_two.py::test_leaks_a_pipe_and_fails",
    ]
    assert with_plugin == [
        "ERROR test_two.py::test_leaks_a_pipe_and_fails",
        "FAILED test_two.py::test_leaks_a_pipe_and_fails",
        "PASSED test_two.py::test_innocent_one_that_collects",
    ]
