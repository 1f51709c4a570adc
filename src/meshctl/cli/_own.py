"""The short-lived session that ``signal`` and ``once`` register for themselves (SPEC §9).

``run``, ``once`` and ``signal`` always act as a session of their own: a child
of ``--session``/``MESH_SESSION`` when one is given (so it never conflicts with,
and never releases, what its parent holds), ``liveness: process`` for this
process, ended when the command finishes. That is what lets ``signal wait``
wait longer than ``max_query_timeout`` (its wait lives as long as its session)
and what lets the ledger see a killed ``once`` as gone.
"""

from __future__ import annotations

import contextlib
import os
import socket
from types import TracebackType
from typing import TYPE_CHECKING, Any

from meshctl.cli import _output
from meshctl.cli._context import State
from meshd.protocol.contract import reportable
from meshd.protocol.errors import MeshError

if TYPE_CHECKING:
    from meshctl._sync import Mesh


def own_params(state: State, source: str, task: str) -> dict[str, Any]:
    """``session.register`` params for a session of this process, child of ``--session``."""
    params: dict[str, Any] = {
        "source": source,
        "task": task[:200],
        "status": "tool-running",
        "liveness": "process",
        "pid": os.getpid(),
        "host": socket.gethostname(),
    }
    with contextlib.suppress(OSError):
        params["cwd"] = reportable(os.getcwd())
    if state.session:
        params["parent"] = state.session
    return params


class OwnSession:
    """``with OwnSession(state, "signal", task) as own:`` -- registered on entry, ended on exit.

    ``own.reg`` is the registration's answer (``disabled`` when the mesh is off);
    ``own.sid`` the session's id. An unreachable daemon raises MeshUnavailable.
    """

    def __init__(self, state: State, source: str, task: str) -> None:
        self.mesh: Mesh = state.mesh()
        self.params = own_params(state, source, task)
        self.reg: dict[str, Any] = {}
        self.sid = ""
        #: The daemon went away while the command waited: the session is not ended on
        #: exit (that would start a new daemon only to end it; a restarted daemon ends
        #: it itself, its process being gone).
        self.gone = False

    def __enter__(self) -> OwnSession:
        self.reg = dict(self.mesh.call("session.register", self.params) or {})
        self.sid = str(self.reg.get("session_id", ""))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.sid or self.reg.get("disabled") or self.gone:
            return
        try:
            self.mesh.call("session.end", {"session_id": self.sid, "reason": "finished"})
        except MeshError as failure:
            if exc is None:
                _output.note(
                    f"could not end session {self.sid} ({failure.message}); the daemon ends "
                    "it when this process is gone"
                )
