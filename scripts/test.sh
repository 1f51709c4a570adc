#!/usr/bin/env bash
# Install everything from scratch into .venv and run every check: ruff, mypy --strict, pytest.
# Usage: scripts/test.sh [pytest args...]     (e.g. -m "not slow"; MESH_TEST_WORKERS=1 for serial)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'
echo "== ruff"
.venv/bin/ruff check src tests bench
.venv/bin/ruff format --check src tests bench
echo "== mypy --strict (src)"
.venv/bin/mypy
echo "== pytest"
# Most tests wait on real daemons and subprocesses, so 4 workers help even on 2 cores.
.venv/bin/python -m pytest -n "${MESH_TEST_WORKERS:-4}" "$@"
