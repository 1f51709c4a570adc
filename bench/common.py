"""What every benchmark shares: pinning, /proc readers, statistics, a raw client, daemons.

Standard library only (the harness must run on a fresh clone with the test extra).
Every figure is a ratio to a floor measured in the same run (BENCH.md), so the
helpers here are used the same way for the floors and for the daemon under test:
same client code, same pinning, same counts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

#: CPUs used for latency rows (client and server share one, BENCH.md) and for
#: throughput rows (server on one, load generator on the other).
NCPU = os.cpu_count() or 1
LAT_CPUS = {0}
SERVER_CPUS = {NCPU - 1}
CLIENT_CPUS = {0}


# --- pinning ------------------------------------------------------------------------


#: How the latency rows run now: "pinned" (``LAT_CPUS``) or "unpinned" (every CPU, as a
#: user's processes run). The bench runs its latency sections once each way.
MODE = {"latency": "pinned"}


def pin(pid: int, cpus: set[int]) -> None:
    """Pin every thread of ``pid`` (0: this process) to ``cpus``.

    ``LAT_CPUS`` means "as the latency rows run now" (:data:`MODE`): every CPU when
    they run unpinned.
    """
    if cpus is LAT_CPUS and MODE["latency"] == "unpinned":
        cpus = all_cpus()
    pid = pid or os.getpid()
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    for tid in tids:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, cpus)


def all_cpus() -> set[int]:
    return set(range(NCPU))


# --- /proc ------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_ns(pid: int) -> float:
    """On-CPU time of every thread of ``pid`` in seconds, at ns resolution (schedstat).

    The same quantity as utime + stime, without the 10 ms tick: short batches of
    requests cost a few ticks at most. Falls back to :func:`cpu_seconds`.
    """
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
    except OSError:
        return cpu_seconds(pid)
    return total / 1e9


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid``."""
    with open(f"/proc/{pid}/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE


def raise_nofile(n: int) -> None:
    """Lift this process's soft RLIMIT_NOFILE (1,000 client sockets)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(max(soft, n), hard)
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


# --- statistics -------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


# --- a raw newline-JSON client (the "blocking client" of floor E) ------------------


class LineClient:
    """One kept connection; send a frame, read one line back. Nothing else."""

    def __init__(self, path: str, timeout: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""

    def roundtrip(self, frame: bytes) -> bytes:
        self.sock.sendall(frame)
        buf = self.buf
        while True:
            i = buf.find(b"\n")
            if i >= 0:
                self.buf = buf[i + 1 :]
                return buf[:i]
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("server closed the connection")
            buf += data

    def close(self) -> None:
        self.sock.close()


def rpc(method: str, params: Any = None, rid: int = 1) -> bytes:
    """A compact JSON-RPC request frame."""
    import json

    obj: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        obj["params"] = params
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def time_roundtrips(client: LineClient, frame: bytes, n: int) -> list[float]:
    """``n`` round trips of ``frame``, each timed (seconds)."""
    out = []
    clock = time.perf_counter
    for _ in range(n):
        t = clock()
        client.roundtrip(frame)
        out.append(clock() - t)
    return out


def wait_answering(path: str, deadline_s: float = 30.0, proc: Any = None) -> float:
    """Poll until ``mesh.ping`` on ``path`` answers; the monotonic time it did."""
    frame = rpc("mesh.ping")
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode}")
        try:
            c = LineClient(path, timeout=2.0)
        except OSError:
            time.sleep(0.0005)
            continue
        try:
            c.roundtrip(frame)
            return time.monotonic()
        except OSError:
            time.sleep(0.0005)
        finally:
            c.close()
    raise RuntimeError(f"nothing answered on {path} within {deadline_s} s")


# --- places and processes -----------------------------------------------------------


@dataclass
class Place:
    """A short temp folder under /tmp for sockets, state and config (sun_path is short)."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mb", dir="/tmp")))

    def env(self, name: str = "bench", config_text: str | None = None) -> dict[str, str]:
        """Environment for a meshd (or meshctl) that lives entirely in this folder."""
        run = self.root / "run"
        run.mkdir(mode=0o700, exist_ok=True)
        state = self.root / f"state-{name}"
        state.mkdir(mode=0o700, exist_ok=True)
        config = self.root / f"config-{name}.toml"
        if config_text is not None or not config.exists():
            config.write_text(config_text or "[defaults]\n")
        env = self.child_env()
        env.update(
            MESH_SOCKET=str(run / f"{name}.sock"),
            MESH_STATE_DIR=str(state),
            MESH_CONFIG=str(config),
            XDG_RUNTIME_DIR=str(run),
            MESH_PROFILE="bench",
            MESH_SPAWN="direct",
        )
        env.pop("MESH_SESSION", None)
        return env

    def child_env(self) -> dict[str, str]:
        """Environment for every process we start: bytecode cached in our folder.

        Installed packages ship compiled bytecode, so users never pay for compiling
        meshd or meshctl; an environment with ``PYTHONDONTWRITEBYTECODE=1`` (this
        one's) would make every start-up compile them again. The cache lives in the
        temp folder (``PYTHONPYCACHEPREFIX``), so the tree is left untouched, and
        the warm-up runs fill it.
        """
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONPYCACHEPREFIX=str(self.root / "pyc"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        return env

    def sock(self, name: str) -> str:
        return str(self.root / f"{name}.sock")

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class Proc:
    """A server process we started; stopped with SIGTERM (then SIGKILL) on exit."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, log: Path | None = None):
        self.argv = argv
        out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
        self.t_exec = time.monotonic()
        self.p = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT
        )
        if log:
            out.close()  # type: ignore[union-attr]

    @property
    def pid(self) -> int:
        return self.p.pid

    def stop(self, timeout: float = 30.0) -> float:
        """SIGTERM and wait; seconds it took to exit."""
        t = time.monotonic()
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        return time.monotonic() - t


def start_meshd(
    place: Place, name: str = "bench", variant: Sequence[str] = (), config_text: str | None = None
) -> tuple[Proc, str]:
    """Start ``python -m meshd run --profile bench`` (or a bench variant) in ``place``."""
    env = place.env(name, config_text)
    if variant:
        argv = [PYTHON, "-m", "bench.meshd_variant", *variant, "run", "--profile", "bench"]
        env["PYTHONPATH"] = str(ROOT)
    else:
        argv = [PYTHON, "-m", "meshd", "run", "--profile", "bench", "--log-level", "warning"]
    proc = Proc(argv, env, place.root / f"{name}.log")
    wait_answering(env["MESH_SOCKET"], proc=proc.p)
    return proc, env["MESH_SOCKET"]


def start_echo(place: Place, name: str = "echo", *extra: str) -> tuple[Proc, str]:
    """Start floor E's echo server on its own socket."""
    path = place.sock(name)
    env = place.child_env()
    proc = Proc([PYTHON, "-m", "bench.echo_server", path, *extra], env)
    wait_answering(path, proc=proc.p)
    return proc, path


@contextlib.contextmanager
def pinned(cpus: set[int], *pids: int) -> Iterator[None]:
    """Pin this process and ``pids`` to ``cpus`` for the block, then free them."""
    for p in (0, *pids):
        pin(p, cpus)
    try:
        yield
    finally:
        for p in (0, *pids):
            pin(p, all_cpus())


@contextlib.contextmanager
def pinning(mode: str, *pids: int) -> Iterator[None]:
    """``pinned(LAT_CPUS, *pids)`` for ``mode`` "pinned"; for "unpinned" every CPU, as a
    user's processes run (the scheduler places them)."""
    with pinned(LAT_CPUS if mode == "pinned" else all_cpus(), *pids):
        yield


def interleave(rounds: int, *steps: Callable[[int], None]) -> None:
    """Run the steps round-robin, ``rounds`` times (rounds interleaved, BENCH.md)."""
    for r in range(rounds):
        for step in steps:
            step(r)
