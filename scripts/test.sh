#!/usr/bin/env bash
# Install everything from scratch into .venv and run every check: ruff, mypy --strict, pytest.
# Usage: scripts/test.sh [pytest args...]     (e.g. -m "not slow"; MESH_TEST_WORKERS=1 for serial)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# Debian and Ubuntu ship venv's pip bootstrap (ensurepip) apart, in python3-venv.
if [ ! -x .venv/bin/python ] && ! "$PY" -c 'import ensurepip' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "== installing python3-venv (python3 -m venv needs it)"
        apt-get install -y -q python3-venv >/dev/null 2>&1 \
            || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q python3-venv >/dev/null; }
    else
        echo "$PY -m venv cannot make a venv here: install python3-venv (sudo apt install python3-venv)" >&2
        exit 1
    fi
fi
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'
# The Hermes integration tests (tests/hermes) run the real hermes-agent in a venv of its
# own: it pins many dependencies exactly and needs Python >=3.11,<3.14, so it is never a
# dependency of session-mesh. Installed once (about 2 min cold, 240 MB), kept when present.
# The `messaging` extra brings aiohttp, which the gateway's api_server platform needs
# (without it `hermes gateway run` starts but never listens).
HERMES_AGENT_VERSION=0.19.0
if ! .venv-hermes/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('hermes-agent') != '$HERMES_AGENT_VERSION' or m.version('aiohttp') == '')" 2>/dev/null; then
    if "$PY" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 14))'; then
        echo "== installing hermes-agent==$HERMES_AGENT_VERSION into .venv-hermes (once)"
        rm -rf .venv-hermes
        "$PY" -m venv .venv-hermes
        .venv-hermes/bin/python -m pip install -q "hermes-agent[messaging]==$HERMES_AGENT_VERSION"
    else
        echo "== $PY is not 3.11-3.13: tests/hermes will be skipped (hermes-agent needs it)"
    fi
fi
# tests/claude runs the real Claude Code CLI (print mode, against a scripted endpoint on
# loopback: offline). Installed from npm into .npm-claude/ (project-local, never global),
# pinned, kept when present; without npm those tests are skipped and say why.
CLAUDE_CODE_VERSION=2.1.328
if command -v npm >/dev/null; then
    if [ "$(.npm-claude/node_modules/.bin/claude --version 2>/dev/null | cut -d' ' -f1)" != "$CLAUDE_CODE_VERSION" ]; then
        echo "== installing @anthropic-ai/claude-code@$CLAUDE_CODE_VERSION into .npm-claude (once)"
        mkdir -p .npm-claude
        npm install --prefix .npm-claude --no-audit --no-fund --loglevel=error \
            "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" >/dev/null 2>&1 \
            || echo "== could not install Claude Code: its tests in tests/claude are skipped"
    fi
else
    echo "== npm not found: the Claude Code tests in tests/claude are skipped"
fi
# tmux drives `meshctl top` in its test, systemd-analyze checks the rendered units, ip
# puts the fleet tests' hosts in network namespaces (tests/fleet): all come with Debian's
# packages; install them when missing and we may (CI runs as root).
for tool in tmux:tmux systemd-analyze:systemd ip:iproute2; do
    if ! command -v "${tool%%:*}" >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "== installing ${tool#*:} (for ${tool%%:*})"
        apt-get install -y -q "${tool#*:}" >/dev/null 2>&1 \
            || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "${tool#*:}" >/dev/null 2>&1; } \
            || echo "== could not install ${tool#*:}: the tests that need ${tool%%:*} are skipped"
    fi
done
echo "== unasync (the blocking session layer is generated from the async one)"
.venv/bin/python scripts/unasync.py --check
echo "== ruff"
.venv/bin/ruff check src tests bench
.venv/bin/ruff format --check src tests bench
echo "== mypy --strict (src)"
.venv/bin/mypy
echo "== pytest"
# Most tests wait on real daemons and subprocesses, so 4 workers help even on 2 cores.
.venv/bin/python -m pytest -n "${MESH_TEST_WORKERS:-4}" "$@"
