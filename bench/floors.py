"""The floors of BENCH.md that are not a server of their own: R, S, W1, WB, D, T.

(E is :mod:`bench.echo_server`, measured with the same client code as meshd.)
Each function returns seconds (or a rate) and never asserts anything about it.
"""

from __future__ import annotations

import os
import queue
import shutil
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

from bench.common import PYTHON, ROOT, Place, Proc, median

S_CLIENT = ROOT / "bench" / "s_client.py"


# --- R: Redis SET NX PX on a Unix socket -----------------------------------------------


class Redis:
    """redis-server on a temp Unix socket, no persistence; ``None`` when not installed."""

    FRAME = b"*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n60000\r\n"

    def __init__(self, place: Place) -> None:
        self.path = place.sock("redis")
        exe = shutil.which("redis-server")
        assert exe is not None
        self.proc = Proc(
            [
                exe,
                "--port",
                "0",
                "--unixsocket",
                self.path,
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
            ],
        )
        deadline = time.monotonic() + 10
        while not os.path.exists(self.path):
            if time.monotonic() > deadline or self.proc.p.poll() is not None:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.005)

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    def stop(self) -> None:
        self.proc.stop()


# --- S: a standard-library-only one-request script ----------------------------------------


def run_times(argv: list[str], env: dict[str, str], n: int) -> list[float]:
    """Whole-process wall times of ``argv`` (exit status checked)."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        done = subprocess.run(
            argv, check=False, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        out.append(time.perf_counter() - t)
        if done.returncode != 0:
            raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr[-400:]!r}")
    return out


def s_argv() -> list[str]:
    return [PYTHON, str(S_CLIENT)]


# --- W1, WB: SQLite commit floors -----------------------------------------------------------


def _db(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, record BLOB NOT NULL)")
    return db


ROW = os.urandom(150).hex().encode()  # 300 bytes


def w1(path: Path, n: int) -> float:
    """Median time for one row committed by a writer thread, hand-off there and back."""
    db = _db(path)
    todo: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    done: queue.SimpleQueue[int] = queue.SimpleQueue()

    def writer() -> None:
        while (i := todo.get()) is not None:
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT OR REPLACE INTO t VALUES (?, ?)", (i, ROW))
            db.execute("COMMIT")
            done.put(i)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    times = []
    clock = time.perf_counter
    for i in range(n):
        s = clock()
        todo.put(i)
        done.get()
        times.append(clock() - s)
    todo.put(None)
    t.join()
    db.close()
    return median(times)


def wb(path: Path, n_commits: int, per: int = 100) -> float:
    """Time per row when one thread writes ``per`` rows to a commit."""
    db = _db(path)
    clock = time.perf_counter
    times = []
    for c in range(n_commits):
        s = clock()
        db.execute("BEGIN IMMEDIATE")
        db.executemany(
            "INSERT OR REPLACE INTO t VALUES (?, ?)", ((c * per + i, ROW) for i in range(per))
        )
        db.execute("COMMIT")
        times.append((clock() - s) / per)
    db.close()
    return median(times)


def handoff(n: int) -> float:
    """T: put to a worker thread and get back, nothing else (median)."""
    todo: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    done: queue.SimpleQueue[int] = queue.SimpleQueue()

    def worker() -> None:
        while (i := todo.get()) is not None:
            done.put(i)

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    clock = time.perf_counter
    times = []
    for i in range(n):
        s = clock()
        todo.put(i)
        done.get()
        times.append(clock() - s)
    todo.put(None)
    t.join()
    return median(times)


# --- D: a minimal anyio daemon from exec to its first answer --------------------------------


def daemon_start(place: Place, i: int, cpu: list[float] | None = None) -> float:
    """Exec the echo server (anyio + msgspec) and wait for its first answer.

    ``cpu``: gets the server's CPU seconds up to that answer (every thread, schedstat).
    """
    path = place.sock(f"d{i}")
    env = place.child_env()
    t = time.monotonic()
    proc = Proc([PYTHON, "-m", "bench.echo_server", path], env)
    try:
        from bench.common import cpu_ns, wait_answering

        answered = wait_answering(path, proc=proc.p)
        if cpu is not None:
            cpu.append(cpu_ns(proc.p.pid))
    finally:
        proc.stop()
        Path(path).unlink(missing_ok=True)
    return answered - t
