"""``claim.check``, ``claim.list``, ``claim.validate`` and ``audit.log``: the claims
read side (SPEC §5). Nothing here changes a claim or writes; who holds a key is
:class:`~meshd.domains.claim_view.ClaimView`'s answer (the table in memory after a
ttl sweep, the fleet for a fleet-wide key: SPEC §12, one view); the audit log is
read from the store's read connection.

The methods are registered by :class:`~meshd.domains.claims.ClaimHandlers`; what
they read through is handed in: the keys (:class:`~meshd.domains.claim_keys.
ClaimKeys`) and the view, the same objects the write side uses.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from meshd.domains.claim_keys import ClaimKeys
from meshd.domains.claim_view import ClaimView
from meshd.keys import Key
from meshd.protocol import claims as pc
from meshd.protocol.contract import rfc3339
from meshd.protocol.errors import InvalidParams
from meshd.slices import Slices
from meshd.store.claims import audit_page

if TYPE_CHECKING:
    from meshd.service import Conn, Service


class ClaimReads:
    """The read-only ``claim.*`` methods and ``audit.log`` of ``claims``'s domain."""

    def __init__(self, svc: Service, view: ClaimView, keys: ClaimKeys) -> None:
        self.svc = svc
        self.view = view
        """Who holds these keys: the table, the fleet for a fleet-wide key."""
        self.keys = keys

    async def check(self, p: pc.ClaimCheckParams, conn: Conn) -> pc.ClaimCheckResult:
        st = self.svc.state
        if st.hidden_from(p.for_profile):
            return pc.ClaimCheckResult(status="free", profile=st.profile, visible=False)
        if not st.settings.enabled:
            return pc.ClaimCheckResult(status="free", disabled=True, profile=st.profile)
        keys = await self.keys.keys_for(p.resources, p.broad)
        self.keys.expire()
        found, warnings, unread = await self.view.holders(keys, p.session_id)
        present = await self._present(keys, p.session_id)
        present += self.view.present_elsewhere(keys)  # other hosts', at a fleet-wide path
        warnings += [
            f"{x.session_id} "
            + ("recently changed " if x.why == "changed" else "is working in ")
            + x.path
            + (f" on {x.host}" if x.host else "")
            + (f" (branch {x.branch})" if x.branch else "")
            + (f" — {x.task}" if x.task else "")
            for x in present
        ]
        return pc.ClaimCheckResult(
            status="held" if found else "free", claims=found,
            present=present, warnings=warnings, profile=st.profile, fleet_unreachable=unread,
        )  # fmt: skip

    async def _present(self, keys: list[Key], caller: str | None) -> list[pc.ClaimPresent]:
        """Other live sessions whose cwd or repo contains one of the paths, or that
        recently changed one: one entry per session, a change before a place (a
        session working in the repo that also changed this very file is named for
        the change, which is what a writer must know), and the sessions named for a
        change listed first (the CLI prints the first few and counts the rest). In
        slices: 256 deep keys are a lot of work for one turn of the loop."""
        st = self.svc.state
        found: dict[str, pc.ClaimPresent] = {}
        slices = Slices()
        for key in keys:
            if not key.is_path:
                continue
            await slices.tick()
            for s, why, where in st.registry.present_at(key.value):
                had = found.get(s.session_id)
                if had is not None and (had.why == "changed" or why != "changed"):
                    continue
                if had is None and caller is not None and st.claims.related(caller, s.session_id):
                    continue
                found[s.session_id] = pc.ClaimPresent(
                    session_id=s.session_id, task=s.task, why=why,  # type: ignore[arg-type]
                    path=where, branch=s.branch, since=rfc3339(s.started_at),
                )  # fmt: skip
        return sorted(found.values(), key=lambda x: x.why != "changed")  # stable

    async def list(self, p: pc.ClaimListParams, conn: Conn) -> pc.ClaimListResult:
        st = self.svc.state
        now = self.svc.clock.monotonic()
        fc = self.view.fleet_claims()
        local_only = self.view.local_only()
        claims = [
            pc.ClaimRecord(
                session_id=c.session_id, resource=c.resource, mode=c.mode, token=c.token,
                since=rfc3339(c.since), reason=c.reason,
                expires_in_s=None if c.deadline is None else round(c.deadline - now, 3),
                local_only=(c.session_id, c.resource) in local_only,
                host=self.view.host_of(c.key),
            )
            for c in st.claims.list_claims(p.session_id)
        ]  # fmt: skip
        claims += await self.view.records(p.session_id)  # other hosts' (SPEC §12)
        waiting = [
            pc.ClaimWaiting(
                session_id=w.session_id, resources=list(w.resources), mode=w.mode,
                since=rfc3339(w.since),
            )
            for w in st.claims.waiting(p.session_id)
        ]  # fmt: skip
        if fc is not None:  # this host's requests in line in the fleet
            waiting += [
                pc.ClaimWaiting(
                    session_id=w.session_id, resources=[k.text for k in w.keys], mode=w.mode,
                    since=rfc3339(w.since),
                )
                for w in fc.waiting()
                if p.session_id is None or w.session_id == p.session_id
            ]  # fmt: skip
        return pc.ClaimListResult(claims=claims, waiting=waiting)

    async def validate(self, p: pc.ClaimValidateParams, conn: Conn) -> pc.ClaimValidateResult:
        return await self.view.validate(await self.keys.key_for(p.resource), p.token)

    async def audit(self, p: pc.AuditLogParams, conn: Conn) -> pc.AuditLogResult:
        since = None
        if p.since is not None:
            try:
                since = datetime.fromisoformat(p.since.replace("Z", "+00:00")).timestamp()
            except ValueError as exc:
                raise InvalidParams(
                    f"since must be an RFC 3339 time, got {p.since!r}", {"path": "$.since"}
                ) from exc
        resource = None
        if p.resource is not None:
            resource = (await self.keys.key_for(p.resource)).text
        rows = await self.svc.store.read(
            lambda db: audit_page(
                db, since=since, limit=p.limit, session_id=p.session_id, resource=resource
            )
        )
        return pc.AuditLogResult(
            entries=[pc.AuditEntry(**{**r, "at": rfc3339(r["at"])}) for r in rows]
        )
