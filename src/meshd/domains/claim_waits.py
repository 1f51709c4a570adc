"""The queued ``claim.acquire`` requests and the one timer that runs them out (SPEC §5).

A request with ``wait`` that the core queues is answered later, by a record
(:class:`_Wait`), not a waiting task: when the core grants it -- the grant is told
by whichever release freed it, after that release is committed
(:meth:`ClaimWaits.resolve`) -- or when the wait runs out (one timer for all
waits), when the request is withdrawn and answered ``held``. Waits are not
durable: a waiter whose connection closes is withdrawn.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from meshd.core.claims.records import Cancelled, Granted, Held, Queued
from meshd.domains.claim_replies import granted, held
from meshd.protocol.errors import InternalError, MeshError
from meshd.protocol.jsonrpc import Later

if TYPE_CHECKING:
    from meshd.core.state import Outcome
    from meshd.service import Conn, Service

log = logging.getLogger("meshd.claims")


class _Wait(Later):
    """One queued ``claim.acquire``: the reply it owes, kept beside its place in the
    core's queue. Answered by :meth:`ClaimWaits.resolve` (granted, withdrawn, or its
    commit failed, always after the commit that settled it) or after its deadline
    (:meth:`ClaimWaits._run_out`); withdrawn if its connection closes first.

    No task and no coroutine frames while it waits: 10,000 of them wait at once in a
    storm, and each task with its five frames was tracked by the cyclic collector
    (~60 middle-generation collections of 1-10 ms per storm, and a full one walking
    them all). A record, its reply sink and one shared timer are all that stay.
    """

    __slots__ = ("conn", "deadline", "owner", "t0", "waiter_id")

    def __init__(self, owner: ClaimWaits, waiter_id: str, deadline: float, conn: Conn) -> None:
        super().__init__()
        self.owner = owner
        self.waiter_id = waiter_id
        self.conn = conn
        """The caller's connection: once it is ``leaving``, this wait is not granted."""
        self.deadline = deadline
        """On the event loop's clock (``loop.time()``)."""
        self.t0 = time.monotonic()

    def withdraw(self) -> None:
        self.owner.withdraw(self)

    def answer(self, outcome: Granted | Held, why: str = "") -> None:
        """Its reply; ``why`` a withdrawn wait's (a pause, its session's end), which the
        reply says (``withdrawn``): its holders alone cannot tell it from one run out."""
        st, waited = self.owner.svc.state, time.monotonic() - self.t0
        if isinstance(outcome, Granted):
            self.settle(granted(st, outcome, waited))
        else:
            self.settle(held(st, outcome, waited, "" if why == "timeout" else why))


class ClaimWaits:
    """The waits of one daemon: each queued request's record by waiter id, and a heap
    of their deadlines behind one timer.

    ``take_back`` undoes a grant whose commit was refused (the claims handler's, which
    also takes back grants answered directly).
    """

    def __init__(self, svc: Service, take_back: Callable[[Granted], None]) -> None:
        self.svc = svc
        self._take_back = take_back
        self.waits: dict[str, _Wait] = {}
        self._deadlines: list[tuple[float, str]] = []
        """A heap of (deadline, waiter id) over :attr:`waits`; entries of waits that
        ended already are skipped when they come up (and pruned when they pile up)."""
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._ids = itertools.count(1)
        self._wake_pending = False
        self._stranded: dict[str, int] = {}
        """Waits still in line because withdrawing them raised twice (waiter id ->
        connection id): out of the line once their connection is gone (:meth:`closed`)."""
        svc.state.claims.departures(self._departed)

    def _departed(self, waiter_id: str) -> bool:
        """Whether ``waiter_id``'s connection is leaving (the claim table's question)."""
        w = self.waits.get(waiter_id)
        return w is not None and w.conn.leaving

    def waiter_id(self, conn: Conn, wait: float) -> str | None:
        """A new waiter id for a request on ``conn`` that may wait, else None."""
        return f"c{conn.id}.{next(self._ids)}" if wait > 0 else None

    def queue(self, q: Queued, wait: float, conn: Conn) -> _Wait:
        """The record that answers queued request ``q`` of ``conn`` within ``wait`` seconds."""
        loop = asyncio.get_running_loop()
        w = self.waits[q.waiter_id] = _Wait(self, q.waiter_id, loop.time() + wait, conn)
        deadlines = self._deadlines
        if len(deadlines) > 2 * len(self.waits) + 64:  # mostly waits that ended: prune
            deadlines[:] = [(x.deadline, x.waiter_id) for x in self.waits.values()]
            heapq.heapify(deadlines)
        heapq.heappush(deadlines, (w.deadline, q.waiter_id))
        self._arm(loop)
        return w

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """One timer for every wait: set for the earliest deadline."""
        if not self._deadlines:
            return
        first = self._deadlines[0][0]
        if self._timer is not None:
            if self._timer_at <= first:
                return
            self._timer.cancel()
        self._timer_at = first
        self._timer = loop.call_at(first, self._run_out)

    def _run_out(self) -> None:
        """Withdraw every wait whose time ran out; each is answered ``held`` once what
        the withdrawals let go (later waiters' grants) is committed (:meth:`resolve`).
        One whose withdrawal raises is answered INTERNAL at once (:meth:`_ran_out_badly`),
        and the rest (and the timer) go on."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = max(loop.time(), self._timer_at)
        deadlines, waits, claims = self._deadlines, self.waits, self.svc.state.claims
        withdrawn = False
        while deadlines and deadlines[0][0] <= now:
            _, wid = heapq.heappop(deadlines)
            if wid in waits:
                try:  # one that raises must not keep the rest (and the timer) from running
                    # None: granted just now, its commit in flight; resolve answers it
                    withdrawn |= claims.cancel_waiter(wid, why="timeout") is not None
                except Exception:
                    log.exception("running out queued claim request %s failed", wid)
                    self._ran_out_badly(wid)
                    withdrawn = True  # whatever it changed before raising is committed
        if withdrawn:
            self.svc.commit_soon()
        self._arm(loop)

    def _ran_out_badly(self, wid: str) -> None:
        """Wait ``wid`` ran out but withdrawing it raised: its deadline is gone from
        the heap, so nothing else would answer it. Marked leaving (never granted, as a
        closed connection's) and out of the queue if it is still there (without working
        out its holders, which may be what raised), then told INTERNAL: it holds
        nothing. A ``Cancelled`` its withdrawal left for the commit finds no record
        then, and is not answered twice. If even that withdrawal raises, the wait stays
        in line, leaving (never granted), until its connection is gone (:meth:`closed`)."""
        w = self.waits.pop(wid, None)
        claims = self.svc.state.claims
        try:
            claims.leave(wid)
            claims.cancel_waiter(wid, why="timeout", wake=False)
        except Exception:
            log.exception("withdrawing queued claim request %s failed", wid)
            if w is not None:
                self._stranded[wid] = w.conn.id
        finally:
            self._wake_soon()
        if w is not None:
            settle_unanswered(w, unanswered(None))

    def withdraw(self, w: _Wait) -> None:
        """Its connection closed: out of the queue, no answer (the record's cancel)."""
        if self.waits.pop(w.waiter_id, None) is not None:
            self.svc.state.claims.cancel_waiter(w.waiter_id, why="closed", wake=False)
            self._wake_soon()

    def closed(self, conn: Conn) -> None:
        """``conn`` is gone: its waits still in line (:attr:`_stranded`) leave it now,
        so they hold up nobody behind them on their keys. Left in line, such a wait
        (marked leaving, its record gone) blocked every later waiter on its keys for good."""
        for wid in [w for w, cid in self._stranded.items() if cid == conn.id]:
            del self._stranded[wid]
            try:
                self.svc.state.claims.cancel_waiter(wid, why="closed", wake=False)
            except Exception:
                log.exception("withdrawing queued claim request %s failed again", wid)
            self._wake_soon()

    def _wake_soon(self) -> None:
        """One wake for every wait withdrawn in this loop turn (a closing connection
        withdraws up to 128 at once), instead of one per withdrawal."""
        if not self._wake_pending:
            self._wake_pending = True
            asyncio.get_running_loop().call_soon(self._wake_now)

    def _wake_now(self) -> None:
        self._wake_pending = False
        self.svc.state.claims.wake_deferred()
        self.svc.flush_background()

    def resolve(self, outcomes: list[Outcome], error: BaseException | None) -> None:
        """Answer the queued requests the last commit granted or withdrew.

        A wait that ran out is answered ``held`` even if that commit was refused: it
        was withdrawn in memory either way, and the refused writes were others'. A
        refused grant is taken back whether or not its waiter is still there to be
        told: one whose connection closed meanwhile kept a claim the disk never had,
        which its session asking again was told it held (``already_held``).

        Each outcome is told on its own: one whose answer raises (a reply that cannot
        be built) is logged, answered INTERNAL (:func:`unanswered`), and the ones after
        it are still answered. Raised out of this loop, it left every later waiter of
        that commit unanswered until its connection closed; logged only, it left that
        one's caller waiting so. (A ``try`` costs nothing until something raises.)"""
        waits = self.waits
        for o in outcomes:
            waiter_id = o.waiter_id
            if not waiter_id:
                continue
            w = None
            try:
                w = waits.pop(waiter_id, None)
                if isinstance(o, Cancelled):
                    if w is None or o.why == "closed":  # its caller left: nobody to tell
                        continue
                    if error is None or o.why == "timeout":
                        w.answer(o.held, o.why)
                        continue
                else:
                    assert o.granted is not None  # a waiter's notice carries its grant
                    if error is None:
                        if w is not None:
                            w.answer(o.granted)
                        continue
                    self._take_back(o.granted)  # refused: holds nothing
                    if w is None:
                        continue
                w.settle(error=error if isinstance(error, MeshError) else MeshError(str(error)))
            except Exception:
                log.exception("answering queued claim request %s failed", waiter_id)
                if w is not None:  # a grant it carried stands once committed
                    g = None if isinstance(o, Cancelled) or error is not None else o.granted
                    settle_unanswered(w, unanswered(g))


def unanswered(g: Granted | None) -> InternalError:
    """What a queued request is told when its own answer could not be built: INTERNAL,
    saying whether it holds the claim. A grant that was committed stands (it is
    durable; taking it back would be another commit, on a path already failing): the
    session holds the set until it releases it or ends, and the error says so, with
    the resources and token, so the caller can release them or go on (CONFORMANCE
    §5). Anything else (``g`` None: a wait withdrawn or run out, a refused commit)
    holds nothing."""
    if g is None:
        return InternalError(
            "Internal error: the claim request ended without a grant; its reply could not "
            "be built", {"granted": False}
        )  # fmt: skip
    return InternalError(
        "Internal error: the claim was granted and is held, but its reply could not be "
        "built; release it (claim.release) if it is not wanted",
        {"granted": True, "resources": [c.resource for c in g.claims], "token": g.token},
    )


def settle_unanswered(w: Later, exc: InternalError) -> None:
    """Answer ``w`` with ``exc`` unless it is answered already (its reply was built and
    the writing raised); logged if even that raises."""
    try:
        w.settle(error=exc)
    except Exception:
        log.exception("answering a queued claim request with INTERNAL failed")
