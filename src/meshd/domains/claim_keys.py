"""Keys as the user typed them, made canonical for the claims domain (SPEC §5).

Canonical keys need the filesystem (a path is resolved: symlinks, ``~``, the repo it
is in), so it is not the core's job; and every claim method, read or write, starts
here. :class:`ClaimKeys` is that start, shared by :class:`~meshd.domains.claims.
ClaimHandlers` (acquire, steal, release), :class:`~meshd.domains.claim_reads.
ClaimReads` (check, list, validate, the audit log) and the preemption domain.
"""

from __future__ import annotations

from meshd.domains.claim_replies import HOME
from meshd.keys import Key, canonical_key
from meshd.protocol.errors import TooLarge
from meshd.service import Service

MAX_FOLDERS = 2048
"""Folders (path components of ``file:``/``repo:`` keys, summed) one claim call may name:
256 keys 8 deep. The table's work on the loop for a set is about one node per folder."""


class ClaimKeys:
    """Canonical keys for what a claims request names, and the ttl sweep before a read."""

    def __init__(self, svc: Service) -> None:
        self.svc = svc

    def expire(self) -> None:
        """Free claims whose ttl ran out before answering (the sweeper may not have yet)."""
        if self.svc.state.claims.expire_ttls():
            self.svc.flush_background()

    async def keys_for(self, resources: list[str], broad: bool) -> list[Key]:
        """The canonical keys; paths are resolved off the event loop (see resolver).

        The claim table's work for a set grows with its keys' depth (a node per folder,
        on the loop, in one step: a set is granted whole or not at all), so a set of
        more than :data:`MAX_FOLDERS` folders in all is refused with ``TOO_LARGE``:
        256 keys 40 folders deep held every other client for a third of a second."""
        keys = await self.svc.resolve_paths(
            resources, lambda: [canonical_key(r, home=HOME, broad=broad) for r in resources]
        )
        folders = sum(k.value.count("/") for k in keys if k.is_path)
        if folders > MAX_FOLDERS:
            raise TooLarge(
                f"these {len(keys)} keys name {folders:,} folders in all; one call takes "
                f"at most {MAX_FOLDERS:,} (claim fewer or shallower paths per call)",
                {"path": "$.resources", "limit": MAX_FOLDERS, "folders": folders},
            )
        return keys

    async def key_for(self, resource: str) -> Key:
        return (await self.keys_for([resource], True))[0]

    async def keys_of(self, resources: list[str], broad: bool) -> list[Key]:
        """Canonical keys for what the user typed (after a ttl sweep)."""
        keys = await self.keys_for(resources, broad)
        self.expire()
        return keys
