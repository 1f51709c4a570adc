"""Step 1 of 3: research. Writes its findings down and passes the baton.

Started at the same moment as code.py and review.py; it needs nobody, so it
just works, notes what it found (shared: the others read it; one private
hunch nobody else ever sees), and emits ``research-done:RUN`` with a summary.
"""

from __future__ import annotations

import os
import sys

from meshctl import Mesh

RUN = sys.argv[1] if len(sys.argv) > 1 else "demo"
WORKDIR = os.environ.get("PIPELINE_DIR", ".")


def main() -> int:
    with Mesh() as mesh, mesh.session(task=f"research for run {RUN}", source="worker") as s:
        s.heartbeat(status="thinking", task="reading the API docs")
        s.notes.add("API base is /v2; every call needs an Idempotency-Key header")
        s.notes.add("hunch: the v1 client is still used by the cron job", private=True)
        s.signal(f"research-done:{RUN}").emit({"endpoints": ["/v2/report"], "by": s.session_id})
        print(f"research: findings noted, baton passed ({s.session_id})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
