"""Step 3 of 3: review. Waits for the code, asks the coder a question, approves.

Waits for ``code-done:RUN``, takes the file's claim (queueing behind the coder
if it still holds it), asks the coder why it did what it did -- its live
responder answers -- tells it the verdict in a message, and emits
``review-done:RUN``, which lets the coder finish.
"""

from __future__ import annotations

import sys
from pathlib import Path

from meshctl import Mesh

RUN = sys.argv[1] if len(sys.argv) > 1 else "demo"


def main() -> int:
    with Mesh(timeout=30) as mesh, mesh.session(task=f"review for run {RUN}", source="worker") as s:
        code = s.signal(f"code-done:{RUN}").wait(timeout=90)
        if code is None:
            print("review: no code within 90 s", file=sys.stderr)
            return 75
        target = Path(code.payload["file"])
        with s.claim(f"file:{target}", shared=True, reason="reviewing", wait=30) as c:
            text = target.read_text() if c.granted else ""
        answer = s.ask(str(code.emitted_by), "why the Idempotency-Key header?", timeout=10)
        verdict = "approved" if answer and "Idempotency-Key" in text else "changes requested"
        s.send(str(code.emitted_by), f"review of {target.name}: {verdict}")
        s.signal(f"review-done:{RUN}").emit({"verdict": verdict})
        print(
            f"review: asked the coder, it answered ({answer.answered_by if answer else '-'}): "
            f"{answer.answer if answer else '-'}",
            flush=True,
        )
        print(f"review: {verdict}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
