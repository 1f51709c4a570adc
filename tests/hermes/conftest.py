"""Fixtures for the Hermes integration: the real hermes-agent 0.19.0, in a venv of its own.

``scripts/test.sh`` installs ``hermes-agent==0.19.0`` into ``.venv-hermes`` (kept
when present); ``HERMES_VENV`` points elsewhere. Hermes computes paths at import
time and keeps its plugin manager per process, so every scenario runs Hermes in a
subprocess with its own ``HOME`` and ``HERMES_HOME`` (short temp folders), against
the test's real meshd.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import MeshEnv

HERMES_VERSION = "0.19.0"
HOOK_TIMEOUT_IN_TESTS = 10.0
"""Seconds the plugin waits for one reply in these tests (``MESH_HERMES_TIMEOUT``; 0.5
by default): long enough for a loaded machine, and the one test of a hung daemon
waits it out once."""
ROOT = Path(__file__).resolve().parents[2]

#: For the scripts the tests run in Hermes's interpreter (which has no meshctl):
#: ``rpc(method, params)`` -- one request to the daemon at ``MESH_SOCKET``, its result.
#: It first waits for what the plugin noted to be sent (its ``flush``): a hook sends
#: statuses, reads and writes from a thread, a moment later. The script imports json,
#: os and socket before it.
RPC = r"""
def flush_plugin():
    import sys
    plugin = sys.modules.get("hermes_plugins.meshd._plugin")
    if plugin is not None and "rt" in plugin._RUNTIMES:
        plugin._RUNTIMES["rt"].flush()

def rpc(method, params=None):
    flush_plugin()
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(os.environ["MESH_SOCKET"])
        s.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method,
                              "params": params or {}}).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            buf += s.recv(65536)
    return json.loads(buf)["result"]
"""


def hermes_venv() -> Path:
    return Path(os.environ.get("HERMES_VENV") or ROOT / ".venv-hermes")


def _installed_version(venv: Path) -> str | None:
    meta = list((venv / "lib").glob("python3*/site-packages/hermes_agent-*.dist-info"))
    return meta[0].name.removesuffix(".dist-info").split("-")[1] if meta else None


@pytest.fixture(scope="session")
def hermes_bin() -> Path:
    venv = hermes_venv()
    version = _installed_version(venv)
    if version is None:
        pytest.skip(
            f"hermes-agent is not installed in {venv}: scripts/test.sh installs "
            f"hermes-agent=={HERMES_VERSION} there (or set HERMES_VENV)"
        )
    assert version == HERMES_VERSION, (
        f"{venv} has hermes-agent {version}, tests pin {HERMES_VERSION}"
    )
    return venv / "bin"


@dataclass
class Hermes:
    """One Hermes home wired to the test's meshd."""

    home: Path
    bin: Path
    env: dict[str, str]

    def run(
        self, *args: str, timeout: float = 120, path: bool = True, **kw: Any
    ) -> subprocess.CompletedProcess[str]:
        """``hermes ARGS`` (``path``: with Hermes's venv on PATH)."""
        return subprocess.run([str(self.bin / "hermes"), *args], env=self.environ(path),
                              capture_output=True, text=True, timeout=timeout, **kw)  # fmt: skip

    def meshctl(
        self, *args: str, path: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """``meshctl ARGS`` from the test's environment (``path``: may find ``hermes``)."""
        return subprocess.run([sys.executable, "-m", "meshctl.cli", *args], env=self.environ(path),
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip

    def python(self, code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``code`` in Hermes's interpreter (its own environment: no session-mesh there)."""
        return subprocess.run([str(self.bin / "python"), "-c", textwrap.dedent(code)],
                              env=self.environ(True), cwd=self.home.parent, capture_output=True,
                              text=True, timeout=timeout)  # fmt: skip

    def environ(self, path: bool) -> dict[str, str]:
        env = dict(self.env)
        parts = [p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p) != self.bin]
        env["PATH"] = os.pathsep.join([str(self.bin), *parts] if path else parts)
        return env

    def config(self, llm_url: str = "http://127.0.0.1:9/v1", extra: str = "") -> None:
        """Write config.yaml: the fake model at ``llm_url``, no network, quiet."""
        (self.home / "config.yaml").write_text(
            "model:\n  provider: custom\n  base_url: " + llm_url + "\n  default: fake-model\n"
            "  api_key: dummy\nsecurity:\n  tirith_enabled: false\n" + extra
        )

    def install(self, *extra: str, path: bool = True) -> dict[str, Any]:
        done = self.meshctl("hermes", "install", "--json", *extra, path=path)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)[0]  # type: ignore[no-any-return]


@pytest.fixture
def hermes(mesh_env: MeshEnv, hermes_bin: Path) -> Hermes:
    home = mesh_env.root / "hh"
    user_home = mesh_env.root / "u"
    home.mkdir()
    user_home.mkdir()
    # MESH_HERMES_TIMEOUT: the plugin's 0.5 s per call is missed on a loaded CI machine
    # (plugin set-up's first call timed out, the Link paused 5 s, the start hook then
    # registered nothing: 5 of 17 runs of TestLifecycle with two busy loops beside).
    env = {**mesh_env.env, "HERMES_HOME": str(home), "HOME": str(user_home),
           "NO_COLOR": "1", "HERMES_ACCEPT_HOOKS": "1",
           "MESH_HERMES_TIMEOUT": str(HOOK_TIMEOUT_IN_TESTS)}  # fmt: skip
    for key in ("OPENAI_API_KEY", "OPENROUTER_API_KEY", "ANTHROPIC_API_KEY", "HERMES_SAFE_MODE"):
        env.pop(key, None)
    h = Hermes(home=home, bin=hermes_bin, env=env)
    h.config()
    return h
