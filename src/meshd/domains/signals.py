"""``signal.emit`` and ``signal.wait`` (SPEC §7): the baton, pushed, never polled.

* ``emit`` numbers the signal (:mod:`meshd.core.work.signals`), stores it before the
  reply, then wakes the waits parked on that name: a waiter hears of the emit as
  soon as it is committed, which is when the emitter hears of it too.
* ``wait`` answers at once when the name's newest signal already qualifies (a
  late waiter still sees an earlier emit); otherwise it parks on an
  :class:`anyio.Event` per name (a ``concurrent`` handler: the connection goes
  on serving) until a qualifying emit, its timeout, its connection closing, or
  -- when it waits for a session -- that session ending (the sweeper wakes it).
* The timeout is capped by ``max_query_timeout`` unless ``session_id`` names a
  live session: such a wait lives as long as its session (``meshctl signal
  wait`` registers one of its own).
* A refused commit (disk full) takes the emit back: nobody is woken, the name's
  counter is as before.
* In a fleet (docs/FLEET.md) an emit is also posted for every other host, in the same
  commit; a signal from another host is taken in as this host's next signal of that
  name (:meth:`SignalHandlers.take`): sequence numbers are per host.
"""

from __future__ import annotations

import msgspec
from anyio import Event, move_on_after

from meshd.core.work.notes import utf8_len
from meshd.core.work.signals import Signal, matches
from meshd.domain import Domain
from meshd.domains.fleet_mail import FleetMail
from meshd.protocol import fleet_mail as wire
from meshd.protocol import signals as ps
from meshd.protocol.errors import TooLarge
from meshd.protocol.jsonrpc import Later
from meshd.service import Conn, Service, rfc3339

_encode = msgspec.json.Encoder().encode


def _payload(sig: Signal) -> msgspec.Raw:
    return msgspec.Raw(sig.payload.encode())


class SignalHandlers(Domain):
    name = "signals"

    def __init__(self, svc: Service, *, fleet: FleetMail) -> None:
        super().__init__(svc)
        self._by_name: dict[str, set[Event]] = {}
        self.fleet = fleet
        self._by_session: dict[str, set[Event]] = {}

    def install(self) -> None:
        self.svc.add(ps.SIGNAL_EMIT, self.emit, is_async=True)
        self.svc.add(ps.SIGNAL_WAIT, self.wait, is_async=True, concurrent=True)

    def prune(self, history_days: float) -> None:
        """Signals older than ``history_days`` (their counters stay)."""
        self.svc.state.signals.prune(history_days)

    def sweep(self) -> None:
        """Wake the waits of sessions that ended (they answer "not received")."""
        sessions = self.svc.state.registry.sessions
        for sid in [s for s in self._by_session if s not in sessions]:
            for ev in self._by_session.pop(sid):
                ev.set()

    async def emit(self, p: ps.SignalEmitParams, conn: Conn) -> ps.SignalRecord:
        work = self.svc.state
        work.check_enabled()
        by = self._emitter(p.session_id)
        payload = _encode(p.payload).decode()
        limit = self.svc.state.settings.max_body_bytes
        if (size := utf8_len(payload)) > limit:
            raise TooLarge(
                f"the payload is {size} bytes encoded; the limit is {limit} (max_body_bytes)",
                {"path": "$.payload", "limit": limit},
            )
        board = work.signals
        before = board.newest.get(p.name), board.counters.get(p.name)
        sig = board.emit(p.name, payload, by)
        self.fleet.to_all(
            wire.MailItem(
                kind="signal", sender=by or "", from_host=self.fleet.host,
                created_at=sig.emitted_at, name=sig.name, payload=payload,
            )
        )  # fmt: skip
        await self._store(sig, before)
        return ps.SignalRecord(
            name=sig.name, seq=sig.seq, payload=_payload(sig), emitted_by=sig.emitted_by,
            emitted_at=rfc3339(sig.emitted_at),
        )  # fmt: skip

    def _emitter(self, sid: str | None) -> str | None:
        """Whom an emit is recorded as (``emitted_by``): the calling session, except the
        short-lived session ``meshctl signal`` registers for itself (source ``signal``,
        a child of ``--session``/``MESH_SESSION``, SPEC §9), which emits for its parent:
        a waiter wants the session it knows, not one that ended with the command. A
        parent that is no session here (a mistyped or ended ``--session``) is not named:
        nothing would vouch for it."""
        if sid is None:
            return None
        reg = self.svc.state.registry
        session = reg.get(sid)
        if session.source == "signal" and session.parent in reg.sessions:
            return session.parent
        return sid

    async def _store(self, sig: Signal, before: tuple[Signal | None, int | None]) -> None:
        """Commit an emit, then wake its waiters; a refused commit takes it back."""
        try:
            await self.svc.commit()
        except BaseException:
            self.svc.state.signals.put_back(sig.name, *before)
            raise
        for ev in self._by_name.pop(sig.name, ()):
            ev.set()

    async def take(self, name: str, payload: str, by: str | None) -> None:
        """A signal emitted on another host: this host's next signal of ``name``
        (committed with whatever the caller left to store, e.g. its seen key)."""
        board = self.svc.state.signals
        before = board.newest.get(name), board.counters.get(name)
        await self._store(board.emit(name, payload, by or None), before)

    async def wait(self, p: ps.SignalWaitParams, conn: Conn) -> ps.SignalWaitResult | Later:
        work = self.svc.state
        work.check_enabled()
        clock, st = self.svc.clock, self.svc.state
        started = clock.monotonic()
        timeout = min(p.timeout, st.settings.max_query_timeout)
        if p.session_id is not None:
            st.registry.get(p.session_id)
            timeout = p.timeout  # bounded by the session's life instead
        since_at = work.signals.since_at(p.since)
        sig = work.signals.newest.get(p.name)
        if not matches(sig, p.after, since_at) and timeout > 0:
            return Later.running(self._until(p, since_at, started, timeout))
        return self._result(p, sig, since_at, started)

    async def _until(
        self, p: ps.SignalWaitParams, since_at: float | None, started: float, timeout: float
    ) -> ps.SignalWaitResult:
        """The rest of ``signal.wait``: parked until a signal matches, the timeout, or
        the waiting session's end."""
        sig = self.svc.state.signals.newest.get(p.name)
        with move_on_after(timeout):
            while not matches(sig, p.after, since_at) and self._session_lives(p.session_id):
                await self._park(p.name, p.session_id)
                sig = self.svc.state.signals.newest.get(p.name)
        return self._result(p, sig, since_at, started)

    def _result(
        self, p: ps.SignalWaitParams, sig: Signal | None, since_at: float | None, started: float
    ) -> ps.SignalWaitResult:
        work, clock = self.svc.state, self.svc.clock
        got = sig if matches(sig, p.after, since_at) else None
        result = ps.SignalWaitResult(
            name=p.name, received=got is not None, last_seq=work.signals.last_seq(p.name),
            waited_s=round(clock.monotonic() - started, 6),
        )  # fmt: skip
        if got is not None:
            result.seq, result.payload = got.seq, _payload(got)
            result.emitted_by, result.emitted_at = got.emitted_by, rfc3339(got.emitted_at)
        return result

    def parked(self) -> int:
        """How many waits are parked now (``mesh.info``'s ``counts.signal_waits``)."""
        return sum(len(events) for events in self._by_name.values())

    def _session_lives(self, sid: str | None) -> bool:
        return sid is None or sid in self.svc.state.registry.sessions

    async def _park(self, name: str, sid: str | None) -> None:
        """Wait for the next emit of ``name`` (or the end of ``sid``)."""
        ev = Event()
        self._by_name.setdefault(name, set()).add(ev)
        if sid is not None:
            self._by_session.setdefault(sid, set()).add(ev)
        try:
            await ev.wait()
        finally:
            _discard(self._by_name, name, ev)
            if sid is not None:
                _discard(self._by_session, sid, ev)


def _discard(index: dict[str, set[Event]], key: str, ev: Event) -> None:
    events = index.get(key)
    if events is not None:
        events.discard(ev)
        if not events:
            del index[key]
