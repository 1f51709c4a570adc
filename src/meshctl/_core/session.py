"""The session rules of the library, without I/O: one core both clients drive.

:class:`SessionCore` decides what a session sends (register and heartbeat params)
and what it reports: which claims it holds under which token, which it lost (a
claim notice a heartbeat reported, a token that no longer validates after the
session had to register again), and the sentence for each loss. ``Session``
(blocking) and ``AsyncSession`` (anyio) only do the I/O around it, so both say
the same thing in the same words (httpx's ``BaseClient`` shape).

Standard library only (the blocking client imports it).
"""

from __future__ import annotations

import os
from _thread import allocate_lock
from time import monotonic

from meshctl import _claims
from meshctl import _log as log
from meshd.protocol.contract import REPORTED, reportable
from meshd.protocol.errors import MeshError

TYPE_CHECKING = False  # not typing's: importing typing costs meshctl's start-up ms
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

    from meshctl import _events

#: Retrying an unreachable daemon (fail_open; heartbeats): the first wait, doubling to the cap.
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0


def next_beat(wait: float, ok: bool, registered: bool, interval: float) -> float:
    """Seconds until the next background heartbeat, after one that was answered
    (``ok``) or not: the session's interval while answered; the first backoff while
    not yet registered (failing open); doubling to the cap while the daemon is gone."""
    if ok:
        return interval if registered else BACKOFF_FIRST
    if not registered:
        return BACKOFF_FIRST
    return min(max(wait * 2, BACKOFF_FIRST), BACKOFF_MAX)


class FailOpen:
    """The fail-open rule of both clients, written once: which failures fail open, what
    a call returns meanwhile, when a connection is tried again, what is said.

    A call that finds the daemon unreachable or hung (``MeshUnavailable``,
    ``MeshTimeout``) raises, unless the client fails open (``enabled``): then it
    returns None, the loss is said once through the ``meshctl`` logger, calls are
    no-ops meanwhile, and a connection is tried again with backoff (0.5 s doubling to
    30 s); reaching the daemon again is said once too. An error the daemon answered is
    never failed open. Each client drives it around its own exchange::

        if policy.skip():
            return None
        try:
            reply = exchange(method, params)
        except (MeshUnavailable, MeshTimeout) as exc:
            policy.failed(exc)  # raises it unless failing open
            return None
        policy.answered(profile)

    ``clock``: the caller's monotonic clock (injected in tests). The state changes under
    a lock of its own, so threads sharing a ``Mesh`` say each change once.
    """

    __slots__ = ("_backoff", "_clock", "_lock", "_retry_at", "degraded", "enabled")

    def __init__(self, enabled: bool = False, clock: Callable[[], float] = monotonic) -> None:
        self.enabled = enabled
        self.degraded = False
        self._retry_at = 0.0
        self._backoff = BACKOFF_FIRST
        self._clock = clock
        self._lock = allocate_lock()

    def skip(self) -> bool:
        """Whether a call now is a no-op without trying (degraded, before the retry)."""
        return self.degraded and self._clock() < self._retry_at

    def failed(self, exc: MeshError) -> None:
        """A call found the daemon unreachable (or hung): ``exc`` is raised unless the
        client fails open; else degrade, and try again after the backoff."""
        if not self.enabled:
            raise exc
        with self._lock:
            if not self.degraded:
                log.warning(
                    "Session Mesh is unreachable, continuing without it (fail_open): %s",
                    exc.message,
                )
                self.degraded = True
                self._backoff = BACKOFF_FIRST
            self._retry_at = self._clock() + self._backoff
            self._backoff = min(self._backoff * 2, BACKOFF_MAX)

    def answered(self, profile: str) -> None:
        """A call was answered (on a connection a timeout left open, say)."""
        if self.degraded:
            self.reached(profile)

    def reached(self, profile: str) -> None:
        """A connection succeeded: no longer degraded."""
        with self._lock:
            if self.degraded:
                log.warning("Session Mesh is reachable again (profile %s)", profile)
                self.degraded = False
                self._backoff = BACKOFF_FIRST

    def may_start(self, autostart: bool) -> bool:
        """Whether a new connection may start the daemon (``autostart``): not while
        degraded."""
        return autostart and not self.degraded

    def forked(self) -> None:
        """In a forked child: a lock a parent thread held at the fork is never
        released here; the child's one thread takes a new one."""
        self._lock = allocate_lock()


class SessionCore:
    """The sans-I/O half of a library session: params, claim bookkeeping, and the
    record of what was lost, so both clients decide and say the same thing.

    Claims: :attr:`held` maps each fencing token this client was granted to the keys
    it still holds under it (canonical, as the daemon wrote them); a loss -- a claim
    notice reported by a heartbeat or pushed, or a token that no longer validates
    after the session had to register again -- moves keys to :attr:`lost_keys`.
    :attr:`generation` counts registrations, so two threads that both saw the
    session expire register it again once, not twice.
    """

    def __init__(
        self,
        *,
        task: str,
        session_id: str | None,
        liveness: str,
        bind: bool,
        fields: dict[str, Any],
    ) -> None:
        self.session_id = session_id
        self.params: dict[str, Any] = {
            "task": task,
            "liveness": liveness,
            "pid": os.getpid(),
            "cwd": reportable(os.getcwd()),
            **fields,
        }
        if bind:
            self.params["bind"] = True
        self.lost: list[str] = []
        self.daemon: tuple[Any, Any] = (None, None)
        self.interval = 5.0
        self.disabled = False
        self.generation = 0
        self.held: dict[int, set[str]] = {}
        self.lost_keys: dict[int, set[str]] = {}
        #: The newest claim-loss notice id heartbeats reported (``lost_after``).
        self.lost_after = 0

    @classmethod
    def asked(
        cls,
        task: str,
        *,
        source: str | None,
        session_id: str | None,
        liveness: str,
        bind: bool,
        fields: dict[str, Any],
    ) -> SessionCore:
        """The core of a session as ``Mesh.session``/``AsyncMesh.session`` were asked for
        it (``source``, when given, is one more register field)."""
        if source is not None:
            fields["source"] = source
        return cls(task=task, session_id=session_id, liveness=liveness, bind=bind, fields=fields)

    def register_params(self) -> dict[str, Any]:
        """What ``session.register`` gets; the same id every time once we have one."""
        if self.session_id is None:
            return self.params
        return {"session_id": self.session_id, **self.params}

    def registered(self, result: Any, daemon: tuple[Any, Any], interval: float | None) -> None:
        """Take in a ``session.register`` result."""
        self.session_id = str(result["session_id"])
        self.disabled = bool(result.get("disabled", False))
        self.interval = float(interval or result.get("heartbeat_interval") or 5.0)
        self.daemon = daemon
        self.generation += 1

    def unreachable(self) -> None:
        """Registering failed open (the daemon unreachable): the session gets an id of
        its own now, under which it registers once the daemon answers."""
        if self.session_id is None:
            import secrets
            import time

            source = self.params.get("source") or "python"
            self.session_id = f"{source}:{time.strftime('%Y%m%d')}-{secrets.token_hex(3)}"

    def remember(self, fields: dict[str, Any]) -> None:
        """Keep the reported fields a heartbeat changes (None = unchanged) for
        registering again (``activity`` is a heartbeat's only)."""
        for key in REPORTED:
            if key != "activity" and fields.get(key) is not None:
                self.params[key] = fields[key]

    def heartbeat_params(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``session.heartbeat`` params: the id plus whatever changed (None = unchanged)."""
        params = {k: v for k, v in fields.items() if v is not None}
        params["session_id"] = self.session_id
        params["lost_after"] = self.lost_after
        return params

    # --- claims ---------------------------------------------------------------------

    def granted(self, token: int | None, resources: Iterable[str]) -> None:
        """This client holds ``resources`` under ``token`` now."""
        if token is not None:
            self.held.setdefault(token, set()).update(resources)

    def released(self, resources: Iterable[str]) -> None:
        """The daemon released ``resources`` (canonical keys) for this session."""
        gone = set(resources)
        for token in list(self.held):
            self.held[token] -= gone
            if not self.held[token]:
                del self.held[token]

    def is_lost(self, token: int | None, resources: Iterable[str]) -> bool:
        """Whether any of ``resources`` under ``token`` is known to be lost."""
        return token is not None and bool(self.lost_keys.get(token, set()) & set(resources))

    def to_validate(self) -> list[tuple[str, int]]:
        """Every (key, token) this client believes it holds, to check after a restart."""
        return sorted((r, t) for t, keys in self.held.items() for r in keys)

    def _lose(self, token: int, resources: Iterable[str]) -> set[str]:
        """Move keys from held to lost; the ones that were held."""
        keys = set(resources) & self.held.get(token, set())
        if keys:
            self.lost_keys.setdefault(token, set()).update(keys)
            self.released(keys)
        return keys

    def take_losses(self, events: Iterable[_events.ClaimEvent]) -> list[str]:
        """Claim-loss notices (from a heartbeat or pushed): one sentence per loss of a
        claim this client held; the cursor moves past every notice seen."""
        out = []
        for e in events:
            if e.id is not None:
                self.lost_after = max(self.lost_after, e.id)
            keys = self._lose(e.token, e.resources)
            if keys:
                out.append(e.text or f"lost {_claim_list([(k, e.token) for k in keys])}")
        return out

    def heard(self, result: Any) -> list[str]:
        """The claim losses a heartbeat's result reported (``lost``): one sentence each."""
        raw = result.get("lost") if isinstance(result, dict) else None
        if not raw:
            return []
        from meshctl import _events  # its NamedTuples need typing: loaded when needed

        return self.take_losses(_events.claim_losses(raw))

    def invalid(self, pairs: Iterable[tuple[str, int]]) -> None:
        """Keys whose tokens the daemon no longer accepts (``claim.validate``)."""
        for key, token in pairs:
            self._lose(token, [key])

    # --- what was lost --------------------------------------------------------------

    def after_restart(
        self, old: tuple[Any, Any], result: Any, lost: list[tuple[str, int]]
    ) -> str | None:
        """What a re-registration after a daemon restart lost (None: nothing)."""
        restored = bool(result.get("refreshed"))
        if restored and not lost:
            return None
        what = (
            "restored the session"
            if restored
            else f"did not know the session; re-registered as {self.session_id}"
        )
        return (
            f"the daemon restarted (pid {old[0]} -> {self.daemon[0]}) and {what}; "
            + _lost_sentence(lost)
        )

    def after_expiry(
        self, exc: MeshError, old: tuple[Any, Any], lost: list[tuple[str, int]]
    ) -> str:
        """What an expired or unknown session lost (``old``: the daemon it had registered with)."""
        what = (
            "expired at the daemon"
            if exc.data_code == "SESSION_EXPIRED"
            else ("was unknown to the daemon")
        )
        message = (
            f"session {self.session_id} {what} ({exc.data_code}: {exc.message}); "
            f"re-registered; {_lost_sentence(lost)}"
        )
        if old != self.daemon:
            message = f"the daemon restarted (pid {old[0]} -> {self.daemon[0]}); {message}"
        return message


def _claim_list(pairs: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{key} (token {token})" for key, token in sorted(pairs))


def _lost_sentence(lost: list[tuple[str, int]]) -> str:
    if not lost:
        return "it held no claims through this client"
    return f"claims it held were released: {_claim_list(lost)}"


class ClaimRecord:
    """What one claim call got, without I/O: the shared half of ``Claim`` and ``AsyncClaim``.

    ``granted``: the whole set is held. ``holders``: who held it when it was not.
    ``token``: the set's fencing token (pass it along to whatever checks
    ``claim.validate``). A key the session held already in the same mode keeps the
    token it was granted under: :attr:`tokens` gives each key's (SPEC §5).
    ``acquired``: the keys (canonical, as the daemon wrote them) this call newly
    took -- the only ones a release gives back.
    ``lost``: True once the session's core knows the claim is gone (a heartbeat
    reported an ``expired``, ``stolen`` or ``lost`` notice, or the token no longer
    validated after the session had to register again, or a validation said so).
    """

    def __init__(
        self, core: SessionCore, result: dict[str, Any], requested: list[str], *, guarded: bool
    ) -> None:
        self._core = core
        self.result = result
        self.requested = requested
        #: False when the mesh is disabled or unreachable (fail_open): nothing is held.
        self.guarded = guarded
        self.granted = result.get("status") == "granted"
        self.holders: list[dict[str, Any]] = [dict(h) for h in result.get("holders") or []]
        self.claims = _claims.claims_of(result)
        self.token = _claims.token_of(result)
        self.acquired = _claims.acquired(result) if guarded else []
        self.deadlock = bool(result.get("deadlock", False))
        self._released = False
        self._lost = False
        #: Why leaving the block could not release what this call acquired (None: it did).
        self.release_failed: str | None = None
        if self.granted and self.guarded:
            for token, keys in self._by_token().items():
                core.granted(token, keys)

    @property
    def keys(self) -> list[str]:
        """Every key of the granted set (canonical)."""
        return [str(c.get("resource")) for c in self.claims]

    @property
    def tokens(self) -> dict[str, int | None]:
        """Each key's fencing token: the set's, or the one a key already held kept."""
        return {
            str(c.get("resource")): self.token if c.get("token") is None else int(c["token"])
            for c in self.claims
        }

    def _by_token(self) -> dict[int | None, list[str]]:
        out: dict[int | None, list[str]] = {}
        for key, token in self.tokens.items():
            out.setdefault(token, []).append(key)
        return out

    @property
    def lost(self) -> bool:
        """Whether this claim is known to be gone (see the class docs)."""
        if self._lost or not self.granted or not self.guarded or self._released:
            return self._lost
        if any(
            self._core.is_lost(token, keys) or self._noticed(token, keys)
            for token, keys in self._by_token().items()
        ):
            self._lost = True
        return self._lost

    def _noticed(self, token: int | None, keys: list[str]) -> bool:
        """Another way a driver may know of a loss (pushed events); none here."""
        return False

    def _validated(self, results: list[Any]) -> bool:
        """Take ``claim.validate`` results (one per key of :attr:`tokens`; None when
        failing open)."""
        bad = [
            (key, token)
            for (key, token), r in zip(self.tokens.items(), results, strict=True)
            if r is not None and not r.get("valid", False) and token is not None
        ]
        if bad:
            self._core.invalid(bad)
            self._lost = True
        return not bad

    def _release_failed(self, failure: MeshError) -> str:
        self.release_failed = f"could not release {', '.join(self.acquired)}: {failure}"
        return self.release_failed

    def __bool__(self) -> bool:
        return self.granted

    def __repr__(self) -> str:
        state = "granted" if self.granted else "held"
        return f"<{type(self).__name__} {state} {self.requested!r} token={self.token}>"
