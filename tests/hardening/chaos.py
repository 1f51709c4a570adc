"""Concurrent clients that record what the daemon acknowledged, for kill -9 checks.

Each :class:`Churner` thread registers sessions and ends some of them on its own
connection, and writes down, per session, what it sent and what was acknowledged
(a reply arrived). After the daemon is killed and restarted, :class:`History`
says what must be there (registration acknowledged, no end ever sent), what must
not (end acknowledged), and what may be either (a request in flight at the kill).
"""

from __future__ import annotations

import json
import os
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import Client


@dataclass
class Op:
    reg_acked: bool = False
    end_sent: bool = False
    end_acked: bool = False


@dataclass
class History:
    ops: dict[str, Op] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    acks: int = 0

    def op(self, sid: str) -> Op:
        with self.lock:
            return self.ops.setdefault(sid, Op())

    def acked(self) -> None:
        with self.lock:
            self.acks += 1

    def must_be_listed(self) -> set[str]:
        return {s for s, o in self.ops.items() if o.reg_acked and not o.end_sent}

    def must_not_be_listed(self) -> set[str]:
        return {s for s, o in self.ops.items() if o.end_acked}

    def operations_acknowledged(self) -> int:
        return sum(o.reg_acked for o in self.ops.values()) + sum(
            o.end_acked for o in self.ops.values()
        )


class Churner(threading.Thread):
    """Registers sessions ``<prefix>-<n>`` and ends about a third of them, until stopped."""

    def __init__(self, path: Path, prefix: str, history: History, seed: int) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.prefix = prefix
        self.history = history
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        live: list[str] = []
        n = 0
        try:
            with Client(self.path) as c:
                while not self.stop.is_set():
                    if live and self.rng.random() < 0.35:
                        sid = live.pop(self.rng.randrange(len(live)))
                        op = self.history.op(sid)
                        op.end_sent = True
                        r = c.call("session.end", {"session_id": sid})
                        if r == "closed":
                            return
                        if "result" in r:
                            op.end_acked = True
                            self.history.acked()
                        continue
                    sid = f"{self.prefix}-{n}"
                    n += 1
                    op = self.history.op(sid)
                    r = c.call("session.register", {"session_id": sid, "task": f"t{n}"})
                    if r == "closed":
                        return
                    if "result" in r:
                        op.reg_acked = True
                        live.append(sid)
                        self.history.acked()
        except OSError:
            return  # the daemon died under us: what was acknowledged is recorded
        except BaseException as exc:  # a bug in the test itself must surface
            self.error = exc


def report(name: str, figures: dict[str, Any]) -> None:
    """Print the figures; also append them to $MESH_CHAOS_REPORT when it is set."""
    line = json.dumps({"test": name, **figures})
    print(line)
    out = os.environ.get("MESH_CHAOS_REPORT")
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


class Messenger(threading.Thread):
    """Sends messages to ``recipients`` until stopped; records each acknowledged id."""

    def __init__(self, path: Path, sender: str, recipients: list[str], seed: int) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.sender = sender
        self.recipients = recipients
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.acked: dict[int, tuple[str, str]] = {}  # id -> (to, text)
        self.error: BaseException | None = None

    def run(self) -> None:
        n = 0
        try:
            with Client(self.path) as c:
                r = c.call("session.register", {"session_id": self.sender})
                if r == "closed" or "result" not in r:
                    return
                while not self.stop.is_set():
                    n += 1
                    to = self.rng.choice(self.recipients)
                    text = f"{self.sender} #{n}"
                    p = {"session_id": self.sender, "to": to, "text": text}
                    r = c.call("message.send", p)
                    if r == "closed":
                        return
                    if "result" in r:
                        self.acked[r["result"]["id"]] = (to, text)
        except OSError:
            return
        except BaseException as exc:
            self.error = exc


def inbox_all(path: Path, session_id: str) -> dict[int, str]:
    """Every item in ``session_id``'s inbox (read or not, without marking): id -> text."""
    out: dict[int, str] = {}
    before: int | None = None
    with Client(path) as c:
        while True:
            p: dict[str, Any] = {"session_id": session_id, "all": True, "peek": True,
                                 "limit": 1000}  # fmt: skip
            if before is not None:
                p["before"] = before
            items = c.call("message.inbox", p)["result"]["items"]
            if not items:
                return out
            for it in items:
                out[it["id"]] = it["text"]
            before = min(it["id"] for it in items)
