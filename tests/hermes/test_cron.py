"""A Hermes cron job on the mesh, run by Hermes 0.19.0's own scheduler (``run_job``, as a
gateway's ticker runs it) in a process that stays up after the job, against the
scripted fake model: no LLM, no network."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.conftest import DaemonHandle
from tests.hermes.conftest import RPC, Hermes
from tests.hermes.fake_llm import FakeLLM, Text

pytestmark = pytest.mark.slow

#: The gateway's ticker calls run_job for each due job and carries on: the process
#: outlives every run. A pre-run script's output goes into the prompt Hermes builds.
SCRIPT = (
    r"""
import json, os, pathlib, socket
from cron.jobs import create_job
from cron.scheduler import run_job

"""
    + RPC
    + r"""
scripts = pathlib.Path(os.environ["HERMES_HOME"]) / "scripts"
scripts.mkdir(exist_ok=True)
(scripts / "balance.py").write_text("print('balance 1234.56 EUR on account 42')")
job = create_job("summarise the numbers", "every 1h", name="nightly-numbers",
                 deliver="local", script="balance.py")
ok = run_job(job)[0]
print(json.dumps({"ok": ok, "job": job["id"], "after": rpc("session.list")["sessions"]}))
"""
)


def test_a_cron_run_is_on_the_mesh_named_after_its_job_and_leaves_when_done(
    daemon: DaemonHandle, hermes: Hermes
) -> None:
    """While the job runs it shows as `cron`, its task the job's name (not the prompt
    Hermes built, which carries Hermes's instructions and the script's output); when the
    run ends it leaves the mesh, though Hermes never finalizes a cron session and the
    process (a gateway) goes on."""
    seen: list[dict[str, dict[str, Any]]] = []
    with FakeLLM(lambda messages: Text("FAKE-FINAL")) as llm:
        llm.on_request = lambda body: seen.append(
            {s["session_id"]: s for s in daemon.call("session.list")["result"]["sessions"]}
        )
        hermes.config(llm.url)
        hermes.install()

        done = hermes.python(SCRIPT)

    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["ok"] is True
    [during] = seen[0].values()
    assert during["session_id"].startswith(f"cron_{out['job']}_")
    assert (during["source"], during["status"]) == ("cron", "thinking")
    assert during["task"] == "cron job nightly-numbers"
    assert out["after"] == [], "the finished run must leave the mesh"
