"""CLI start-up: one ``meshctl`` command, whole process, against S and against the peer.

BENCH.md: any one-round-trip ``meshctl`` command costs at most 1.2x S (a stdlib
script that connects, sends one request and prints the reply) and at most 0.8x
the same call of the peer session-coord, a daemon-less stdlib CLI over SQLite, both
as shipped (a script, which Python compiles on every call) and imported from cached
bytecode (its best version).

The hot commands -- ``check``, ``heartbeat``, ``sessions active``, ``claim``,
``release`` -- each get a row against S. When ``PEER_SESSION_COORD`` names a
checkout of session-coord, its CLI is measured in the same rounds on its own
database with the same ten live sessions, twice: as shipped
(``scripts/session_coord.py`` run by this interpreter) and imported from cached
bytecode (:meth:`Peer.cached`). Measured: its ``check``, its ``status`` (the
board: what ``sessions active`` shows), its ``claim`` and ``release``, and a whole
register -> claim -> release -> end cycle (four processes each side). Each peer
row's floor is the peer's figure, so its ratio is ours / theirs. Without the
variable the peer rows are skipped with the reason.

Rounds are interleaved (one run of every command per round, unpinned as a user runs
it, then every command again pinned to one CPU with the daemon), after two warm-up
runs each (page cache, ``.pyc``); each ratio's spread is the lowest and highest of
the round-by-round ratios. The
figures are wall times, as BENCH.md asks; each row's note adds the same ratio in
CPU time (user + system of the process, from ``wait4``), which a machine shared
with other work disturbs far less than wall time.
"""

from __future__ import annotations

import os
import resource
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import floors
from bench.common import PYTHON, median, pinning, start_meshd
from bench.report import spread
from bench.targets import register_many

if TYPE_CHECKING:
    from bench.targets import Ctx

#: BENCH.md's targets for one ``meshctl`` command.
LIMIT_S = 1.2
LIMIT_PEER = 0.8
#: What each hot command runs (``{me}``: the bench's registered session).
HOT: dict[str, list[str]] = {
    "check": ["check", "res:bench-startup"],
    "heartbeat": ["heartbeat"],
    "sessions active": ["sessions", "active"],
    "claim": ["claim", "res:bench-startup"],
    "release": ["release", "res:bench-startup"],
}
RES = "res:bench-startup"
#: The peer imported as a module (``python -c``, its arguments after it), not run as a
#: script: the bytecode cache serves it, as it would a console-script entry point.
CACHED = (
    "import sys; sys.path.insert(0, {folder!r}); sys.argv[0] = 'session_coord.py'; "
    "from session_coord import main; main()"
)


def peer_script() -> tuple[Path | None, str]:
    """session-coord's CLI from ``PEER_SESSION_COORD``, or None and why not."""
    root = os.environ.get("PEER_SESSION_COORD")
    if not root:
        return None, "set PEER_SESSION_COORD to a checkout of session-coord"
    script = Path(root) / "scripts" / "session_coord.py"
    if not script.is_file():
        return None, f"no scripts/session_coord.py under PEER_SESSION_COORD={root}"
    return script, ""


class Peer:
    """session-coord on its own database in the bench folder, ten live sessions on it."""

    def __init__(self, script: Path, folder: Path, env: dict[str, str]) -> None:
        folder.mkdir(exist_ok=True)
        self.script = script
        self.argv = [PYTHON, str(script)]
        # Its board, cron manifest and profile folder all inside ours (never ~/.hermes).
        self.env = dict(
            env,
            HERMES_COORD_DB=str(folder / "session_coordination.db"),
            HERMES_COORD_CRON_MANIFEST=str(folder / "cron_resources.json"),
            HERMES_COORD_CRON_JOBS=str(folder / "jobs.json"),
            HERMES_COORD_PROFILES_DIR=str(folder / "profiles"),
        )
        for i in range(10):
            self.me = self.register(f"live {i}")

    def run(self, *args: str) -> str:
        done = subprocess.run(
            [*self.argv, *args], env=self.env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"session-coord {args} exited {done.returncode}: {done.stderr}")
        return done.stdout

    def register(self, task: str) -> str:
        """A new session's id (its first output line)."""
        return self.run("register", "--task", task, "--surface", "cli").split()[0]

    def cmd(self, *args: str) -> list[str]:
        """The call as shipped: the script, which Python compiles on every run."""
        return [*self.argv, *args]

    def cached(self, *args: str) -> list[str]:
        """The same call with the script imported, so its bytecode comes from the cache
        (``PYTHONPYCACHEPREFIX``, filled by the warm-up runs): the peer at its best."""
        return [PYTHON, "-c", CACHED.format(folder=str(self.script.parent)), *args]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds, stdout) of one whole process, which must exit 0.

    The CPU time is what the reaped child added to this process's children's times.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr[-400:]!r}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout.decode()


def _chain(
    steps: list[list[str]], env: dict[str, str], session_var: str | None
) -> tuple[float, float]:
    """Wall and CPU time of register, then the rest acting for the registered id.

    ``session_var``: the environment variable that names the session (ours), or None
    when each later command takes the id as ``--id ID`` (the peer).
    """
    wall, cpu, out = timed(steps[0], env)
    sid = out.split()[0]
    child = dict(env, **{session_var: sid}) if session_var else env
    for step in steps[1:]:
        w, c, _ = timed(step if session_var else [*step, "--id", sid], child)
        wall, cpu = wall + w, cpu + c
    return wall, cpu


def run(ctx: Ctx) -> None:
    """Every command against a daemon of its own holding exactly the ten live sessions.

    Not the shared bench daemon: earlier sections leave hundreds of sessions on it
    (a full run lists thousands), and the peer lists its ten, so ``sessions active``
    against ``status`` would compare listings of different sizes.
    """
    daemon, sock = start_meshd(ctx.place, "startup")
    try:
        register_many(sock, [ctx.me] + [f"live{i}" for i in range(9)])
        _run(ctx, daemon.pid)
    finally:
        daemon.stop()


def _run(ctx: Ctx, daemon_pid: int) -> None:
    env = ctx.place.env("startup")
    env["MESH_SESSION"] = ctx.me
    meshctl = os.path.join(os.path.dirname(PYTHON), "meshctl")
    cmds = {"S": floors.s_argv(), **{k: [meshctl, *a] for k, a in HOT.items()}}
    script, why = peer_script()
    peer = Peer(script, ctx.place.root / "peer", env) if script else None
    if peer is not None:
        for arm, make in (("peer", peer.cmd), ("peer cached", peer.cached)):
            cmds |= {
                f"{arm} check": make("check", "--res", RES),
                f"{arm} status": make("status"),
                f"{arm} claim": make("claim", "--id", peer.me, "--res", RES),
                f"{arm} release": make("release", "--id", peer.me, "--res", RES),
            }
    ours_chain = [
        [meshctl, "register", "--task", "startup cycle"],
        [meshctl, "claim", "res:bench-cycle"],
        [meshctl, "release", "res:bench-cycle"],
        [meshctl, "end"],
    ]
    chain_env = {k: v for k, v in env.items() if k != "MESH_SESSION"}
    wall: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}

    def keep(mode: str, key: str, figures: tuple[float, float, Any] | tuple[float, float]) -> None:
        wall.setdefault((mode, key), []).append(figures[0])
        cpu.setdefault((mode, key), []).append(figures[1])

    def env_of(key: str) -> dict[str, str]:
        return peer.env if peer is not None and key.startswith("peer") else env

    for k, argv in cmds.items():
        for _ in range(2):  # warm-up: page cache, .pyc
            timed(argv, env_of(k))
    for _ in range(ctx.n.proc_n):  # each round: every command unpinned, then pinned
        for mode in MODES:
            with pinning(mode, daemon_pid):
                for k, argv in cmds.items():
                    keep(mode, k, timed(argv, env_of(k)))
                keep(mode, "cycle", _chain(ours_chain, chain_env, "MESH_SESSION"))
                if peer is not None:
                    for arm, make in (("peer", peer.cmd), ("peer cached", peer.cached)):
                        steps = [
                            make("register", "--task", "startup cycle", "--surface", "cli"),
                            make("claim", "--res", "res:bench-cycle"),
                            make("release", "--res", "res:bench-cycle"),
                            make("done"),
                        ]
                        keep(mode, f"{arm} cycle", _chain(steps, peer.env, None))
    for mode in MODES:
        _rows(ctx, mode, wall, cpu, has_peer=peer is not None, why=why)


#: Unpinned (as a user runs a command) first, then pinned to one CPU with the daemon.
MODES = ("unpinned", "pinned")


def _rows(
    ctx: Ctx,
    mode: str,
    wall: dict[tuple[str, str], list[float]],
    cpu: dict[tuple[str, str], list[float]],
    *,
    has_peer: bool,
    why: str,
) -> None:
    g = "startup"

    def w(key: str) -> list[float]:
        return wall[mode, key]

    def cpu_note(ours: str, floor: str) -> str:
        theirs = cpu.get((mode, floor))
        if not theirs or not median(theirs):
            return ""
        return f"CPU {median(cpu[mode, ours]) / median(theirs):.2f}x"

    s = median(w("S"))
    ctx.add(g, name="S: stdlib one-request script, whole process", value=s, unit="s",
            note="floor", pinning=mode)  # fmt: skip
    for key, args in HOT.items():
        ctx.add(g, name=f"meshctl {' '.join(args)}", value=median(w(key)), unit="s",
                floor="S", floor_value=s, limit=LIMIT_S, note=cpu_note(key, "S"), pinning=mode,
                spread=spread(w(key), w("S")))  # fmt: skip
    ctx.add(g, name="meshctl register, claim, release, end (4 processes)",
            value=median(w("cycle")), unit="s", floor="S", floor_value=s,
            note=f"context; {cpu_note('cycle', 'S')}", pinning=mode)  # fmt: skip
    pairs = (
        ("check", "check", "meshctl check vs session-coord check"),
        ("sessions active", "status", "meshctl sessions active vs session-coord status"),
        ("claim", "claim", "meshctl claim vs session-coord claim"),
        ("release", "release", "meshctl release vs session-coord release"),
        ("cycle", "cycle", "register, claim, release, end vs session-coord's (with done)"),
    )
    for arm, label in (("peer", "as shipped"), ("peer cached", "from cached bytecode")):
        for ours, theirs, name in pairs:
            key = f"{arm} {theirs}"
            ctx.add(
                g,
                name=f"{name}, {label}",
                value=median(w(ours)),
                unit="s",
                floor="peer",
                floor_value=median(w(key)) if has_peer else None,
                limit=LIMIT_PEER,
                skip="" if has_peer else why,
                note=cpu_note(ours, key) if has_peer else "",
                pinning=mode,
                spread=spread(w(ours), w(key)) if has_peer else None,
            )
