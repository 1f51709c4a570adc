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
from meshd.protocol.errors import MeshError, MeshUnavailable, StorageUnavailable

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


class Leaving:
    """What a command sends on its way out (its session's end, a job's end, a ``once``
    key's outcome), to a daemon that runs, never to one started only for that.

    A daemon that went away while COMMAND ran has the session on its disk; one started
    now would only end it, which the next daemon does anyway (the session's processes
    are gone). So these calls never autostart: what could not be sent is collected and
    said once by :meth:`report`, and the command keeps its exit status (COMMAND's).
    """

    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh
        #: what could not be sent, each a phrase after "not sent:"
        self.unsent: list[str] = []

    def call(self, method: str, params: dict[str, Any], what: str) -> Any:
        """``method`` to the daemon if one runs; None (and ``what`` kept) when none does.

        Other refusals raise, for the caller to say."""
        self.mesh.autostart = False  # this Mesh only talks to a running daemon from now on
        try:
            return self.mesh.call(method, params)
        except StorageUnavailable:
            raise  # the daemon runs, its storage failed: said by the caller, as any refusal
        except MeshUnavailable:
            self.unsent.append(what)
            return None

    def end(self, sid: str, reason: str) -> None:
        """End session ``sid``; a refusal other than "no daemon" is said at once."""
        what = f"the end of session {sid} (the next meshd ends it: its process is gone)"
        try:
            self.call("session.end", {"session_id": sid, "reason": reason}, what)
        except MeshError as failure:
            _output.note(
                f"could not end session {sid} ({failure.message}); the daemon ends it when "
                "this process is gone"
            )

    def report(self) -> None:
        """Say, in one note, what could not be sent because meshd is gone."""
        if self.unsent:
            _output.note(
                "meshd is gone (it stopped or crashed meanwhile) and was not started again "
                "only for this; not sent: " + "; ".join(self.unsent)
            )
            self.unsent.clear()


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
        #: calls on the way out (``once``'s outcome, the end): never start a daemon
        self.leaving = Leaving(self.mesh)

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
        if exc is None:
            self.leaving.end(self.sid, "finished")
            self.leaving.report()
            return
        with contextlib.suppress(MeshError):  # the error on its way out says enough
            self.leaving.call("session.end", {"session_id": self.sid, "reason": "finished"}, "")
