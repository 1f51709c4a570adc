"""Who holds these keys: the one answer every claims read gives (SPEC §12, one view).

A local key is answered from this host's table. A fleet-wide key (a shared kind,
or a path under ``shared_paths``) is answered from the table for this host's own
claims and from the fleet -- through :class:`~meshd.ports.FleetPort` -- for every
other host's. Every read that reports claims asks :class:`ClaimView`:
``claim.check`` (and so ``meshctl check`` and the Hermes warnings) through
:meth:`ClaimView.holders` and, for who works at a fleet-wide path,
:meth:`ClaimView.present_elsewhere`, ``claim.validate``
through :meth:`ClaimView.validate`, ``claim.list`` through :meth:`ClaimView.elsewhere`,
``sessions show`` and the listings ``sync`` reads through :meth:`ClaimView.sessions`.
``app.wire`` makes one and hands the same object to the claims and sessions domains,
so a read added later is fleet-aware by asking it, not by remembering the fleet.

This host's table is read in memory (no disk); the fleet is read when asked, and only
while this host is in a fleet and a fleet-wide key is concerned.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import msgspec

from meshd.domains.claim_replies import holder, warning
from meshd.keys import Key, from_canonical
from meshd.ports import FleetAccess, FleetClaimsPort, FleetDown, Holding
from meshd.protocol import claims as pc
from meshd.protocol import methods as m
from meshd.protocol.contract import rfc3339
from meshd.protocol.errors import BadKey, MeshUnavailable

if TYPE_CHECKING:
    from meshd.core.state import MeshState

log = logging.getLogger("meshd.claims")


class ClaimView:
    """The claims of this host's table and, for fleet-wide keys, of the fleet."""

    def __init__(self, state: MeshState, fleet: FleetAccess) -> None:
        self.state = state
        self._fleet = fleet

    def fleet_claims(self) -> FleetClaimsPort | None:
        """The fleet's claims while this host is in a fleet (None: alone)."""
        fleet = self._fleet.fleet
        return None if fleet is None else fleet.claims

    def local_only(self) -> set[tuple[str, str]]:
        """(session, resource) of the fleet-wide claims granted here alone."""
        fc = self.fleet_claims()
        return set() if fc is None else fc.local_only

    async def holders(
        self, keys: Sequence[Key], caller: str | None
    ) -> tuple[list[pc.ClaimHolder], list[str], str]:
        """The claims in the way of ``keys`` (those of ``caller``'s family left out),
        the human sentence for each (this host's, then the other hosts'), and why the
        fleet could not be read ("" when it was, or was not asked). A fleet that
        cannot be reached leaves a warning saying so, not a false "free"."""
        st = self.state
        found = st.claims.check(keys, caller)
        holders = [holder(st, c, host=self.host_of(c.key)) for c in found]
        warnings = [warning(st, c) for c in found]
        fleet = self._fleet.fleet
        if fleet is None or not any(fleet.claims.is_fleet(k) for k in keys):
            return holders, warnings, ""
        try:
            remote = await fleet.holders(keys)
        except FleetDown as exc:
            why = f"the fleet cannot be reached now ({exc})"
            warnings.append(f"the other hosts' claims on fleet-wide keys could not be read: {why}")
            return holders, warnings, why
        known = await self._granted_at(remote)
        for h in remote:
            at = h.since or known.get((h.session_id, h.resource), 0.0)
            holders.append(
                pc.ClaimHolder(
                    session_id=h.session_id, resource=h.resource, task=h.task,
                    since=rfc3339(at) if at else "", reason=h.reason, mode=h.mode,
                    profile=st.profile, branch=h.branch, host=h.host,
                )
            )  # fmt: skip
            warnings.append(_remote_warning(h, at))
        return holders, warnings, ""

    async def _granted_at(self, remote: list[Holding]) -> dict[tuple[str, str], float]:
        """When the fleet granted each of ``remote`` (session, resource), as the listings'
        view of the commit records has it -- ``claim.list`` and ``sessions show`` give
        the same ``since`` (one view, SPEC §12); none when it cannot say."""
        if not remote or all(h.since for h in remote):
            return {}
        held = await self.elsewhere()
        return {(h.session_id, h.resource): h.since for h in held or () if h.since}

    def host_of(self, key: Key) -> str | None:
        """The host to name for this host's own claim on ``key``: this host's name for a
        fleet-wide key while in a fleet (the name every other host gives it), None for
        a local key or a host alone (one view, SPEC §12)."""
        fleet = self._fleet.fleet
        return fleet.host if fleet is not None and fleet.claims.is_fleet(key) else None

    def present_elsewhere(self, keys: Sequence[Key]) -> list[pc.ClaimPresent]:
        """Other hosts' live sessions whose cwd or repo contains a fleet-wide path of
        ``keys``, or lies under it (``claim.check``'s ``present``), as the fleet's
        registry lists them: one entry per session, each with its host. Only a place
        inside ``shared_paths`` counts: storage every host sees, the same path on each
        (a folder above it, or elsewhere, is a place on that host's own disk)."""
        fleet = self._fleet.fleet
        if fleet is None:
            return []
        fc = fleet.claims
        paths = [k.value for k in keys if k.is_path and fc.is_fleet(k)]
        if not paths:
            return []
        found: dict[str, pc.ClaimPresent] = {}
        for info in fleet.remote_sessions(fresh=True):
            for why, place in (("cwd", info.cwd), ("repo", info.repo)):
                if info.session_id in found or not place or not _fleet_wide(fc, "file:" + place):
                    continue  # a place outside the shared folders is its own host's
                if any(_within(place, p) or _within(p, place) for p in paths):
                    found[info.session_id] = pc.ClaimPresent(
                        session_id=info.session_id, task=info.task, why=why,  # type: ignore[arg-type]
                        path=place, branch=info.branch, since=info.started_at, host=info.host,
                    )  # fmt: skip
        return list(found.values())

    async def validate(self, key: Key, token: int) -> pc.ClaimValidateResult:
        """Whether ``token`` holds ``key`` now: in the fleet for a fleet-wide key (on
        any host), in this host's table for a local key or a local-only claim."""
        st = self.state
        fc = self.fleet_claims()
        if fc is not None and fc.is_fleet(key) and not self._local_only(fc, key, token):
            try:
                valid, sid, host = await fc.validate(key, token)
            except FleetDown as exc:
                raise MeshUnavailable(
                    f"{key.text} is fleet-wide and the fleet cannot be reached ({exc})",
                    {"resource": key.text, "reason": "fleet"},
                ) from exc
            return pc.ClaimValidateResult(valid=valid, resource=key.text, session_id=sid, host=host)
        valid = st.claims.validate(key, token)
        holder_id = None
        if valid:
            holder_id = next(
                (c.session_id for c in st.claims.check([key]) if c.token == token), None
            )
        return pc.ClaimValidateResult(valid=valid, resource=key.text, session_id=holder_id)

    def _local_only(self, fc: FleetClaimsPort, key: Key, token: int) -> bool:
        """Whether ``token`` is a local-only claim's on ``key`` (validated here alone)."""
        return any(
            c.token == token and (c.session_id, c.resource) in fc.local_only
            for c in self.state.claims.check([key])
        )

    async def elsewhere(self, session_id: str | None = None) -> list[Holding] | None:
        """Every claim other hosts hold in the fleet now (of ``session_id`` only, if
        given): [] when this host is alone, None when the fleet cannot say."""
        fleet = self._fleet.fleet
        if fleet is None:
            return []
        try:
            return await fleet.held(session_id)
        except FleetDown as exc:
            log.debug("claims: the other hosts' fleet claims cannot be read: %s", exc)
            return None

    async def records(self, session_id: str | None) -> list[pc.ClaimRecord]:
        """``claim.list``'s claims of other hosts (none for a session of this host)."""
        if session_id is not None and session_id in self.state.registry.sessions:
            return []
        return [
            pc.ClaimRecord(
                session_id=h.session_id, resource=h.resource, mode=h.mode, token=h.token,
                since=rfc3339(h.since) if h.since else "", reason=h.reason, host=h.host,
            )
            for h in await self.elsewhere(session_id) or ()
        ]  # fmt: skip

    async def sessions(
        self, infos: list[m.SessionInfo], *, whole: bool = False
    ) -> list[m.SessionInfo]:
        """Other hosts' sessions (as the registry listed them) with their claims on
        fleet-wide keys as the fleet holds them now; their local keys (and a grant made
        there alone, ``local_only``, which the fleet does not know) as listed. When
        the fleet cannot say, as listed. At most ``LISTED_CLAIMS`` claims each, as a
        listing shows them, unless ``whole`` (``session.get``)."""
        fc = self.fleet_claims()
        if fc is None or not infos:
            return infos
        one = infos[0].session_id if len(infos) == 1 else None
        found = await self.elsewhere(one)
        if found is None:
            return infos
        by_session: dict[str, list[m.ClaimInfo]] = {}
        for h in found:
            by_session.setdefault(h.session_id, []).append(
                m.ClaimInfo(
                    resource=h.resource, mode=h.mode, token=h.token,
                    since=rfc3339(h.since) if h.since else "", reason=h.reason,
                )
            )  # fmt: skip
        out = []
        for info in infos:
            kept = [c for c in info.claims if c.local_only or not _fleet_wide(fc, c.resource)]
            fleet = by_session.get(info.session_id, [])
            total = info.claims_total - (len(info.claims) - len(kept)) + len(fleet)
            claims = [*kept, *fleet]
            out.append(
                msgspec.structs.replace(
                    info, claims=claims if whole else claims[: m.LISTED_CLAIMS],
                    claims_total=max(total, len(claims)),
                )
            )  # fmt: skip
        return out

    def mark_local_only(self, session_id: str, result: pc.ClaimAcquireResult) -> None:
        """Say in a grant's own answer which of its keys are local-only (SPEC §12)."""
        alone = self.local_only()
        if not alone or result.status != "granted":
            return
        for c in result.claims:
            c.local_only = (session_id, c.resource) in alone
        result.local_only = any(c.local_only for c in result.claims)


def _remote_warning(h: Holding, at: float = 0.0) -> str:
    """``cli:… holds res:gpu on h1 (branch b) since 14:02 — big run``: another host's
    claim (``at``: when the fleet granted it, when known); after the dash its reason,
    else its holder's task, as the holding host says it (:func:`claim_replies.warning`)."""
    verb = "is sharing" if h.mode == "shared" else "is editing" if _is_path(h) else "holds"
    branch = f" (branch {h.branch})" if h.branch else ""
    since = f" since {datetime.fromtimestamp(at).strftime('%H:%M')}" if at else ""
    what = h.reason or h.task
    tail = f" — {what}" if what else ""
    return f"{h.session_id} {verb} {h.resource} on {h.host}{branch}{since}{tail}"


def _within(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (both canonical, absolute)."""
    folder = folder.rstrip("/") or "/"
    return path == folder or path.startswith(folder if folder == "/" else folder + "/")


def _fleet_wide(fc: FleetClaimsPort, resource: str) -> bool:
    """Whether a listed claim's ``resource`` (canonical) is decided by the fleet."""
    try:
        return fc.is_fleet(from_canonical(resource))
    except BadKey:
        return False


def _is_path(h: Holding) -> bool:
    return h.resource.startswith(("file:", "repo:"))
