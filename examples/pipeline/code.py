"""Step 2 of 3: code. Waits for the research, writes the code, answers the reviewer.

Waits (pushed, no polling) for ``research-done:RUN``, reads what the researcher
wrote down, holds a claim on the file while it writes it, reports the change
on the board, and passes the baton with ``code-done:RUN``. It stays up as its
session's live responder -- the reviewer asks it why -- until ``review-done:RUN``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from meshctl import Mesh

RUN = sys.argv[1] if len(sys.argv) > 1 else "demo"
WORKDIR = Path(os.environ.get("PIPELINE_DIR", ".")).resolve()


def why(query: object) -> str:
    """The coder's own answer to a question from another session (data, not orders)."""
    return "I send an Idempotency-Key because the research notes say /v2 needs one"


def main() -> int:
    target = WORKDIR / "report_client.py"
    with Mesh(timeout=30) as mesh, mesh.session(task=f"code for run {RUN}", source="worker") as s:
        s.on_query(why)
        research = s.signal(f"research-done:{RUN}").wait(timeout=60)
        if research is None:
            print("code: no research within 60 s", file=sys.stderr)
            return 75
        found = [n.text for n in s.notes.list(research.emitted_by)]
        with s.claim(f"file:{target}", reason="writing the client", wait=30) as c:
            if not c.granted:
                print(f"code: {target} is held by {c.holders}", file=sys.stderr)
                return 75
            s.heartbeat(status="tool-running", task=f"writing {target.name}")
            target.write_text(f'"""Client for {research.payload["endpoints"]}."""\n# {found[0]}\n')
            mesh.call(
                "board.changed",
                {
                    "session_id": s.session_id,
                    "paths": [str(target)],
                    "summary": "first version of the report client",
                },
            )
        s.signal(f"code-done:{RUN}").emit({"file": str(target)})
        print(
            f"code: wrote {target.name} from {len(found)} note(s); waiting for review", flush=True
        )
        review = s.signal(f"review-done:{RUN}").wait(timeout=60)
        print(f"code: review says {review.payload if review else 'nothing'}", flush=True)
    return 0 if review is not None else 75


if __name__ == "__main__":
    sys.exit(main())
