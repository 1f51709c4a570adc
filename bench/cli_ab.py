"""One ``meshctl`` command, whole process, tree against tree, S and the peer, interleaved.

``python -m bench.cli_ab LABEL=TREE [LABEL=TREE …] [--rounds N] [--cmd check …]``: one
meshd (this checkout's) holding ten live sessions; each tree's CLI runs with that
tree's ``src`` first on ``PYTHONPATH``, as the console script pip writes runs it
(``from meshctl.cli import main``). Every round runs S and each arm once, unpinned (as a
user runs it) and then pinned to one CPU with the daemon; with ``PEER_SESSION_COORD``
set, session-coord's same call joins both as shipped (its script, compiled on every
call) and imported from cached bytecode. Printed per mode: each arm's median wall and
CPU time over the rounds with the spread (min-max), as ratios to S and to the peer.
CPU time (user + system of the child) moves far less with the load of a shared machine
than wall time does.
"""

from __future__ import annotations

import argparse
import os

from bench import floors
from bench.ab_writes import trees_of
from bench.common import PYTHON, Place, median, pinning, start_meshd
from bench.startup import RES, Peer, peer_script, timed
from bench.targets import register_many

MAIN = "import sys; from meshctl.cli import main; sys.exit(main())"
#: our command -> the peer's same call (its id given when it needs one)
CMDS = {
    "check": (["check", RES], ["check", "--res", RES]),
    "sessions active": (["sessions", "active"], ["status"]),
    "claim": (["claim", RES], ["claim", "--res", RES]),
    "release": (["release", RES], ["release", "--res", RES]),
}


def spread(values: list[float]) -> str:
    return f"{median(values) * 1e3:6.1f} ms ({min(values) * 1e3:.1f}-{max(values) * 1e3:.1f})"


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.cli_ab", description=__doc__)
    ap.add_argument("trees", nargs="+", metavar="LABEL=TREE")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--cmd", nargs="+", choices=sorted(CMDS), default=["check"])
    args = ap.parse_args()
    trees = trees_of(args.trees)
    place = Place()
    load = os.getloadavg()
    daemon, sock = start_meshd(place, "cli")
    try:
        me = "cli-ab-me"
        register_many(sock, [me] + [f"live{i}" for i in range(9)])
        env = place.env("cli")
        env["MESH_SESSION"] = me
        arms: dict[str, tuple[list[str], dict[str, str]]] = {"S": (floors.s_argv(), env)}
        script, why = peer_script()
        peer = Peer(script, place.root / "peer", env) if script else None
        for cmd in args.cmd:
            ours, theirs = CMDS[cmd]
            for label, tree in trees.items():
                tenv = dict(env, PYTHONPATH=f"{tree / 'src'}{os.pathsep}{env['PYTHONPATH']}")
                arms[f"{label} {cmd}"] = ([PYTHON, "-c", MAIN, *ours], tenv)
            if peer is not None:
                pargs = [*theirs, "--id", peer.me] if cmd in ("claim", "release") else theirs
                arms[f"peer {cmd}"] = (peer.cmd(*pargs), peer.env)
                arms[f"peer-cached {cmd}"] = (peer.cached(*pargs), peer.env)
        wall: dict[tuple[str, str], list[float]] = {}
        cpu: dict[tuple[str, str], list[float]] = {}
        for argv, aenv in arms.values():  # warm-up: page cache, bytecode
            timed(argv, aenv)
            timed(argv, aenv)
        for _ in range(args.rounds):
            for mode in ("unpinned", "pinned"):
                with pinning(mode, daemon.pid):
                    for name, (argv, aenv) in arms.items():
                        w, c, _ = timed(argv, aenv)
                        wall.setdefault((mode, name), []).append(w)
                        cpu.setdefault((mode, name), []).append(c)
        end = os.getloadavg()
        print(
            f"{args.rounds} rounds; load average {load[0]:.1f} at the start, {end[0]:.1f} "
            f"at the end{'' if peer else f'; no peer: {why}'}"
        )
        for mode in ("unpinned", "pinned"):
            s_w, s_c = median(wall[mode, "S"]), median(cpu[mode, "S"])
            print(f"\n{mode}: arm, wall median (min-max), x S, CPU, x S, x peer, x peer cached")
            for name in arms:
                w, c = wall[mode, name], cpu[mode, name]
                line = f"  {name:<28} {spread(w)}  {median(w) / s_w:5.2f}x  CPU {spread(c)}"
                line += f"  {median(c) / s_c:5.2f}x"
                cmd = name.split(" ", 1)[-1]
                for p in ("peer", "peer-cached"):
                    if (mode, f"{p} {cmd}") in wall and not name.startswith("peer"):
                        line += f"  {median(w) / median(wall[mode, f'{p} {cmd}']):5.2f}x {p}"
                print(line)
    finally:
        daemon.stop()
        place.cleanup()


if __name__ == "__main__":
    main()
