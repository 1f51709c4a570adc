#!/bin/sh
# Start the three steps at the same moment; they order themselves through the mesh.
# Usage: examples/pipeline/run.sh [RUN]      (PIPELINE_DIR: where code.py writes; default .)
here=$(dirname "$0")
run=${1:-$(date +%Y%m%d-%H%M%S)}
"${PYTHON:-python3}" "$here/review.py" "$run" & r=$!
"${PYTHON:-python3}" "$here/code.py" "$run" & c=$!
"${PYTHON:-python3}" "$here/research.py" "$run" & s=$!
wait $s; a=$?; wait $c; b=$?; wait $r; d=$?
exit $((a | b | d))
