#!/usr/bin/env bash
# Install Session Mesh into .venv, start the daemon (embedded SQLite store) for a demo
# profile, register a few sessions the way agents would, and show what the mesh sees.
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
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q -e . 2>&1 | grep -v "^WARNING: Location" || true
export PATH="$PWD/.venv/bin:$PATH"
export MESH_PROFILE=${MESH_PROFILE:-demo}

echo "== meshctl daemon start (profile $MESH_PROFILE)"
meshctl daemon start

# A worker process whose session lives exactly as long as it does (liveness: process).
sleep 300 &
WORKER=$!
meshctl register --id "worker:import" --source worker --pid "$WORKER" \
    --task "importing transactions" >/dev/null
# A session a shell script keeps alive by heartbeats (liveness: heartbeat).
SID=$(meshctl register --source cli --liveness heartbeat --task "refactor auth")
meshctl heartbeat --session "$SID" --status tool-running --task "running tests"

echo
meshctl sessions active
echo
echo "== the CLI session claims src/; a cron-style job that needs it politely defers (exit 75)"
meshctl claim --session "$SID" "$PWD/src" --reason "refactor auth"
meshctl run --res "$PWD/src" -- echo "this would have run" || echo "(run exited $?: held)"
echo
echo "== another session asks what the CLI session is doing (answered by the status responder)"
ASKER=$(meshctl register --source shell --liveness heartbeat --task "nightly report")
meshctl sessions ask --session "$ASKER" "$SID" "what are you doing?" || true
meshctl end --session "$ASKER" >/dev/null
echo
echo "== shared work: a note, a signal a later step waits for, and a side effect done at most once"
meshctl notes add --session "$SID" "API base moved to /v2; tests need REDIS_URL" >/dev/null
meshctl notes list
meshctl signal emit "tests-green:demo" --payload '{"passed": 617}' >/dev/null
meshctl signal wait "tests-green:demo" --timeout 5
KEY="daily-report:$(date -u +%F):$$"
meshctl once --key "$KEY" -- echo "sending the daily report (first caller runs it)"
meshctl once --key "$KEY" -- echo "never printed" || echo "(second once exited $?: already done)"
echo
echo "== the radar of everything, as \`meshctl top\` shows it live"
meshctl heartbeat --session "$SID" --status tool-running --task "running tests" >/dev/null
meshctl top --once
echo
echo "== the worker process ends: its session goes within 2 s (pidfd)"
kill "$WORKER"; wait "$WORKER" 2>/dev/null || true
sleep 1
meshctl sessions active
echo
meshctl --json sessions show "$SID"
meshctl end --session "$SID" >/dev/null
echo
echo "The daemon keeps running: 'meshctl daemon status', 'meshctl daemon stop'."
