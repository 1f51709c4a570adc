#!/bin/sh
# The side effect that must happen at most once a day (here: append to a file).
echo "daily report sent by $1 at $(date -u +%H:%M:%S)" >> "${REPORT_LOG:-/tmp/daily-report.log}"
