"""What one ``meshctl`` invocation knows, and the daemon connection it leads to.

Standard library only (no click): the hot commands' fast path (:mod:`meshctl.cli._fast`)
builds a :class:`State` without click, and the click commands get theirs from the root
group (:func:`meshctl.cli._context.get_state`); both run the same command bodies.
"""

from __future__ import annotations

from meshctl.cli import _output

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from typing import Any

    import click

    from meshctl._sync import Mesh


def undecodable(text: str) -> bool:
    """Whether ``text`` (an argument, an environment value) holds lone surrogates:
    bytes that were not UTF-8 (checked by the fast path and the click path alike)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


class State:
    """What one ``meshctl`` invocation knows: the resolved root options and its client."""

    def __init__(self) -> None:
        self.profile = "default"
        self.socket: str | None = None
        self.session: str | None = None
        self.json = False
        #: options given on the command line (an outer one then beats the environment)
        self.explicit: set[str] = set()
        #: the context of the command that runs (names arguments in refusals); None on
        #: the fast path, which leaves every command line that needs it to click
        self.command: click.Context | None = None
        self._mesh: Mesh | None = None
        #: session ids as typed -> the full ids they resolved to (:mod:`meshctl.cli._ids`)
        self.aliases: dict[str, str] = {}

    def mesh(self, *, autostart: bool = True) -> Mesh:
        """A connected client for this profile; starts the daemon unless ``autostart=False``.

        One client per invocation; it is closed when the command finishes
        (:func:`close`).
        """
        if self._mesh is None:
            from meshctl import _spawn
            from meshctl._sync import Mesh

            if _output.note not in _spawn.ANNOUNCE:
                _spawn.ANNOUNCE.append(_output.note)  # "started meshd for profile …" on stderr

            # --socket means what MESH_SOCKET means, also to a daemon this starts: the
            # Mesh passes it into that daemon's environment (never into ours).

            self._mesh = Mesh(self.profile, self.socket, autostart=autostart)
        return self._mesh

    def call(
        self,
        method: str,
        params: Any = None,
        *,
        autostart: bool = True,
        timeout: float | None = None,
    ) -> Any:
        """One request to this profile's daemon (library errors propagate).

        Text that cannot be sent (undecodable argv bytes) is refused first, naming
        its argument (:func:`meshctl.cli._text.check_text`). A session id the daemon
        does not know is taken as a prefix, and the call sent again with the one id
        it matches (:mod:`meshctl.cli._ids`; the error path only), as many times as
        the call holds typed ids (``send`` with a short recipient and a short
        ``--session``).
        """
        from meshctl.cli._text import check_text
        from meshd.protocol.errors import UnknownSession

        check_text({"method": method}, self.command)
        check_text(params, self.command)
        mesh = self.mesh(autostart=autostart)
        if self.aliases:
            from meshctl.cli._ids import substitute

            params = substitute(params, self.aliases)
        while True:  # each pass resolves one more typed id, or raises
            try:
                return mesh.call(method, params, timeout=timeout)
            except UnknownSession as exc:
                from meshctl.cli._ids import resolve, substitute

                full = resolve(exc, params, self.live_ids)
                if full is None or exc.data["session_id"] in self.aliases:
                    raise
                self.aliases[str(exc.data["session_id"])] = full
                if self.session == exc.data["session_id"]:
                    self.session = full
                params = substitute(params, self.aliases)

    def live_ids(self) -> list[str]:
        """The ids of the live sessions (this host's and, in a fleet, the others')."""
        listed = self.mesh().call("session.list", {})
        return [str(s.get("session_id")) for s in listed.get("sessions") or []]

    def reached(self) -> bool:
        """Whether this invocation's client has reached a daemon (answered ``mesh.info``):
        a connection lost after that means the daemon went away, not that none runs."""
        return self._mesh is not None and self._mesh.daemon != (None, None)

    def require_session(self) -> str:
        """The session this command acts for, or the NO_SESSION refusal."""
        if not self.session:
            raise _output.no_session()
        return self.session

    def close(self) -> None:
        """Close the client, if one was opened."""
        if self._mesh is not None:
            mesh, self._mesh = self._mesh, None
            mesh.close()
