#!/bin/sh
# One cron job; two of them (two machines' crontabs, a laptop and a server profile
# sharing one daemon, a retry) must not both send the day's report.
#   0 7 * * *  examples/daily-report/job.sh cron-a
#   5 7 * * *  examples/daily-report/job.sh cron-b
# The first reserves daily-report:YYYY-MM-DD (synced to disk before the report is sent)
# and sends; the other sees "done" (or "running") and exits 75 without sending. If a
# job is killed while sending, the key turns "unknown": nobody sends again until a
# person checks and runs `meshctl once --resolve daily-report:YYYY-MM-DD done|free`.
here=$(dirname "$0")
exec meshctl once --key "daily-report:$(date -u +%F)" -- "$here/send-report.sh" "${1:-cron}"
